//go:build !race

package proxy

import (
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/airlock-proxy/airlock/ca"
)

// A request's goroutine serves its connection for as long as the connection stays open,
// and keeps the stack the request grew until a GC shrinks it, which an idle proxy may not
// run for minutes: with 10,000 idle keep-alive connections, every KiB of stack a request
// path needs beyond its first 8 KiB costs 10 MiB. The path through the policy, the audit
// record and a credential (what airlock adds to goproxy's) fits in 8 KiB: its rare
// branches, logs and large values are out of line (go:noinline) or off the stack. Before
// that, every connection's stack grew to 16 KiB (measured with no GC during the run).
// (Not under -race: its instrumentation grows every frame.)
func TestIdleConnectionsKeepNoGrownStack(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) }))
	defer up.Close()
	port := mustURL(up.URL).Port()
	c, _ := ca.New()
	full := benchFullProxy(t, benchEngine(t), c, x509.NewCertPool())
	for _, tc := range []struct{ name, target string }{
		{"policy and audit", "http://pypi.org:" + port + "/simple/"},
		{"with a credential", "http://cred.example:" + port + "/simple/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := measureIdle(t, full.Addr().String(), tc.target, 300)
			// 8 KiB each, plus one in eight grown to 16 KiB at most (the other goroutines of
			// this process may grow a little meanwhile).
			t.Logf("stack per idle connection: %.0f before a GC, %.0f after", m.stackNoGC, m.stack)
			if m.stackNoGC > 9216 {
				t.Errorf("idle connections keep %.0f bytes of stack each (before a GC), want at most 9216: the request path's stack outgrew 8 KiB (see docs/performance.md, idle connections)", m.stackNoGC)
			}
		})
	}
}
