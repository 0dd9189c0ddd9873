package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/telemetry"
)

// With no span exporter the request's span records nothing and no child span is started;
// the upstream still gets a traceparent: the request span's, which the audit record names,
// never the one the sandbox sent. The policy step's duration metric is still recorded.
func TestUnrecordedSpansStillPropagate(t *testing.T) {
	var mu sync.Mutex
	var got []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Traceparent"))
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	defer up.Close()

	log := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "p.rego"), []byte("package airlock\n\ndecision := {\"action\": \"allow\", \"rule\": \"all\", \"reason\": \"test\"}\n"), 0o600)
	eng, err := rego.New(context.Background(), rego.Options{Dir: dir, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	auditPath := filepath.Join(dir, "audit.jsonl")
	sink, err := audit.Open(audit.Options{Path: auditPath, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := ca.New()
	p, err := New(Options{Decider: eng, CA: c, Auditor: sink, Telemetry: &OTel{T: tel}, Logger: log,
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go p.Serve(ln)
	e := &env{addr: ln.Addr().String(), ca: c}
	const sandboxParent = "00-11111111111111111111111111111111-2222222222222222-01"
	for range 2 {
		req, _ := http.NewRequest("GET", up.URL+"/x", nil)
		req.Header.Set("Traceparent", sandboxParent)
		resp, err := e.client(nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	metrics := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(metrics, httptest.NewRequest("GET", "/metrics", nil))
	p.Shutdown(context.Background())
	sink.Close()

	// The decision records carry the request span's ids.
	f, err := os.Open(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct {
			Decision string `json:"decision"`
			TraceID  string `json:"trace_id"`
			SpanID   string `json:"span_id"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.TraceID != "" && ev.SpanID != "" {
			want["00-"+ev.TraceID+"-"+ev.SpanID+"-00"] = true
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("upstream saw %d requests, want 2", len(got))
	}
	for _, tp := range got {
		if tp == sandboxParent || !want[tp] {
			t.Errorf("upstream traceparent %q, want the request span's, one of %v", tp, want)
		}
	}
	if !strings.Contains(metrics.Body.String(), "airlock_policy_eval_duration_seconds_count") {
		t.Error("no policy evaluation duration metric")
	}
}

// Red team: whatever trace headers a sandbox sends, with no span exporter and its
// traceparent not trusted, the upstream gets exactly one traceparent, the request span's
// (named by the audit record), unsampled, and no tracestate: over plain HTTP and inside
// an intercepted tunnel.
func TestSandboxTraceHeadersNeverReachTheUpstream(t *testing.T) {
	const sp = "00-11111111111111111111111111111111-2222222222222222-01"
	cases := []struct{ name, hdr string }{
		{"none", ""},
		{"sampled", "traceparent: " + sp + "\r\n"},
		{"upper case with state", "TRACEPARENT: " + sp + "\r\nTRACESTATE: evil=leak,x=y\r\n"},
		{"two", "traceparent: " + sp + "\r\ntraceparent: 00-33333333333333333333333333333333-4444444444444444-01\r\n"},
		{"invalid", "traceparent: 00-00000000000000000000000000000000-2222222222222222-01\r\ntracestate: a=b\r\n"},
		{"future version", "traceparent: cc-11111111111111111111111111111111-2222222222222222-09-extra\r\n"},
		{"state only", "tracestate: only=state\r\n"},
	}
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	e := newEnv(t, func(o *Options) { o.Telemetry = &OTel{T: tel} })
	for _, intercepted := range []bool{false, true} {
		for _, c := range cases {
			n := e.audit.Len()
			target := e.http.URL
			if intercepted {
				target = e.https.URL
			}
			sendRaw(t, e, intercepted, target, c.hdr)
			var up *http.Request
			select {
			case up = <-e.upstream:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s (intercepted %v): the upstream got nothing", c.name, intercepted)
			}
			e.audit.WaitSince(n, 5*time.Second, func(evs []audit.Event) bool { return len(evs) > 0 })
			want := map[string]bool{}
			for _, ev := range e.audit.Since(n) {
				want["00-"+ev.TraceID+"-"+ev.SpanID+"-00"] = true
			}
			tp := up.Header.Values("Traceparent")
			if len(tp) != 1 || !want[tp[0]] || up.Header.Values("Tracestate") != nil {
				t.Errorf("%s (intercepted %v): upstream traceparent %q tracestate %q, want one of %v and none",
					c.name, intercepted, tp, up.Header.Values("Tracestate"), want)
			}
		}
	}
}

// sendRaw sends one GET for target/allowed/x through the proxy with extra header lines,
// inside a CONNECT tunnel when intercepted, and reads the answer.
func sendRaw(t *testing.T, e *env, intercepted bool, target, extra string) {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var rw net.Conn = c
	host := strings.TrimPrefix(strings.TrimPrefix(target, "http://"), "https://")
	line := "GET " + target + "/allowed/x HTTP/1.1\r\n"
	if intercepted {
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", host, host)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		roots := x509.NewCertPool()
		roots.AddCert(e.ca.Certificate())
		rw = tls.Client(c, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		line = "GET /allowed/x HTTP/1.1\r\n"
	}
	fmt.Fprintf(rw, "%sHost: %s\r\n%sConnection: close\r\n\r\n", line, host, extra)
	resp, err := http.ReadResponse(bufio.NewReader(rw), nil)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
}
