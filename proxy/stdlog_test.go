package proxy

import (
	"bytes"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/telemetry"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// Red team: an upstream that writes more after its response makes net/http's transport
// log "Unsolicited response received on idle HTTP channel starting with %q" through the
// standard library's log package, quoting what the upstream sent: the credential it was
// given, echoed. The airlock command sends that log through telemetry.StdLogWriter (as
// this test does), which withholds every quoted string.
func TestUnsolicitedBytesNeverReachTheLog(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	std := slog.New(slog.NewJSONHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	prevOut, prevFlags := log.Writer(), log.Flags()
	log.SetOutput(telemetry.StdLogWriter(std))
	log.SetFlags(0)
	t.Cleanup(func() { log.SetOutput(prevOut); log.SetFlags(prevFlags) })

	re := newReflectEnvServing(t, Limits{MaxRedactionsPerCredential: 1 << 30}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nX-Token: %s\r\n\r\n%s", token, token)
		_ = rw.Flush()
		time.Sleep(500 * time.Millisecond)
	}))
	// DELETE goes through net/http's Transport (a GET to a plain-HTTP upstream does not:
	// h1.go, which drops a connection with unasked bytes on it and logs nothing); the GETs
	// after it must get their own answers all the same.
	for _, method := range []string{"DELETE", "GET"} {
		for _, kind := range []string{"http", "https/1.1"} {
			// A keep-alive client: the upstream connection goes back to the idle pool, where
			// the transport finds the extra bytes.
			resp, body := get(t, re.client(nil), method, re.bases[kind]+"/echo/extra", "")
			if resp.StatusCode != 200 || body != "ok" {
				t.Errorf("%s %s: got %d %q, want the response before the extra bytes", method, kind, resp.StatusCode, body)
			}
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		if strings.Count(out, "Unsolicited response") >= 2 || time.Now().After(deadline) {
			if !strings.Contains(out, "Unsolicited response") || !strings.Contains(out, "withheld") {
				t.Fatalf("the transport's line did not come through the writer: %q", out)
			}
			if l := e2etest.Leak([]byte(out), re.canary); l != "" {
				t.Fatalf("the standard library's log holds the credential (%s): %s", l, out)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
