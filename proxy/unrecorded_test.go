package proxy

import (
	"bufio"
	"context"
	"encoding/json"
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
