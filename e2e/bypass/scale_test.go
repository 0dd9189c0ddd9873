//go:build e2e && scale

package bypass_test

import (
	"bufio"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/proxy"
)

// idleHolder opens n connections to addr from another process (the file-descriptor limit
// here is 20000 per process, and the proxy side needs one per connection too) and keeps
// them open until its stdin closes.
const idleHolder = `
import socket, sys
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
conns = []
for i in range(n):
    s = socket.create_connection((host, port))
    conns.append(s)
print("ready", len(conns), flush=True)
sys.stdin.read()
`

// TestTenThousandIdleConnections: 10,000 idle connections held open, and the proxy still
// serves a normal client. Run with:
//
//	go test -tags 'e2e scale' -count=1 -run TestTenThousandIdleConnections ./e2e/bypass/
func TestTenThousandIdleConnections(t *testing.T) {
	// Timeouts long enough that the proxy does not shed the idle connections itself.
	e := newEnv(t, func(o *proxy.Options) {
		o.Limits.ReadHeaderTimeout, o.Limits.IdleTimeout = 2*time.Minute, 5*time.Minute
	})
	host, port, _ := strings.Cut(e.addr, ":")
	cmd := exec.Command("python3", "-c", idleHolder, host, port, "10000")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("python3: %v", err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready 10000") {
		t.Fatalf("idle holder: %q %v", line, err)
	}
	for i := 0; i < 3; i++ {
		r := e.raw(t, fmt.Sprintf("GET %s/public/normal HTTP/1.1\r\nHost: upstream.test:%d\r\n\r\n", e.upstreamURL(), e.port))
		if r.status != 200 {
			t.Fatalf("normal client with 10,000 idle connections open: got %s, want 200", r)
		}
	}
}
