package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/audit"
)

// approveAll approves every held request at once.
type approveAll struct{}

func (approveAll) Hold(context.Context, approval.Request) (approval.Result, error) {
	return approval.Result{ID: "appr-1", State: "approved", DecidedBy: "alice"}, nil
}

// countingUpstream counts every connection and request that reaches it.
type countingUpstream struct {
	srv      *httptest.Server
	conns    atomic.Int64
	requests atomic.Int64
	onReq    func(*http.Request)
}

func newCountingUpstream(t *testing.T, tls bool) *countingUpstream {
	t.Helper()
	u := &countingUpstream{}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.requests.Add(1)
		if u.onReq != nil {
			u.onReq(r)
		}
		io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, "upstream says hi")
	}))
	u.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			u.conns.Add(1)
		}
	}
	if tls {
		u.srv.StartTLS()
	} else {
		u.srv.Start()
	}
	t.Cleanup(u.srv.Close)
	return u
}

// do sends one request through the proxy and returns the status (0 when the proxy refused
// a CONNECT: Go's client reports that as an error, whose text is returned).
func do(c *http.Client, method, u, body string) (int, string) {
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Airlock-Rule") + " " + string(b)
}

// tunnelClient reaches "localhost:<port>" through a tunnel CONNECT (the test policy
// tunnels localhost), trusting the upstream's own certificate.
func tunnelClient(e *env, up *httptest.Server) *http.Client {
	c := up.Client()
	c.Transport.(*http.Transport).Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: e.addr})
	c.Transport.(*http.Transport).TLSClientConfig.ServerName = "example.com"
	return c
}

func localhostURL(s *httptest.Server, path string) string {
	u, _ := url.Parse(s.URL)
	return u.Scheme + "://localhost:" + u.Port() + path
}

// With the audit log on a full disk and on_failure block, nothing reaches an upstream:
// not the first request, not a CONNECT (intercepted or tunnelled), not an approved write,
// not a report-only request. Each is refused with 503 audit.unavailable.
func TestFullAuditLogForwardsNothing(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	for _, reportOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("report-only=%v", reportOnly), func(t *testing.T) {
			sink, err := audit.Open(audit.Options{Path: "/dev/full", OnFailure: audit.OnFailureBlock})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sink.Close() })
			e := newEnv(t, func(o *Options) { o.Auditor, o.Approver, o.ReportOnly = sink, approveAll{}, reportOnly })
			plain, tlsUp := newCountingUpstream(t, false), newCountingUpstream(t, true)
			c := e.client(nil)
			for _, tc := range []struct {
				name, method, url string
				client            *http.Client
			}{
				{"first request", "GET", plain.srv.URL + "/allowed/1", c},
				{"second request", "GET", plain.srv.URL + "/allowed/2", c},
				{"approved write", "POST", plain.srv.URL + "/write", c},
				{"denied (report-only lets it through)", "GET", plain.srv.URL + "/denied", c},
				{"intercepted CONNECT", "GET", tlsUp.srv.URL + "/allowed/3", c},
				{"tunnel CONNECT", "GET", localhostURL(tlsUp.srv, "/anything"), tunnelClient(e, tlsUp.srv)},
			} {
				status, body := do(tc.client, tc.method, tc.url, "payload")
				refused := status == 503 && strings.Contains(body, "audit.unavailable") ||
					status == 0 && strings.Contains(body, "Service Unavailable")
				if !reportOnly && tc.name == "denied (report-only lets it through)" {
					refused = status == 403 || refused
				}
				if !refused {
					t.Errorf("%s: got %d %q, want 503 audit.unavailable", tc.name, status, body)
				}
			}
			if n, m := plain.conns.Load()+tlsUp.conns.Load(), plain.requests.Load()+tlsUp.requests.Load(); n != 0 || m != 0 {
				t.Errorf("the upstreams saw %d connections and %d requests with the audit log full, want none", n, m)
			}
		})
	}
}

// sizeLimited is an audit log with a little room left: records up to limit bytes (as the
// sink encodes them) are written, larger ones fail, as on a disk whose last block is
// partly free.
type sizeLimited struct {
	limit int
	mu    sync.Mutex
	ev    []audit.Event
}

func (s *sizeLimited) Record(_ context.Context, ev *audit.Event) error {
	b, _ := json.Marshal(ev.Sanitized())
	if len(b) > s.limit {
		return errors.New("no space left on device")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ev = append(s.ev, *ev)
	return nil
}

// Large requests alternating with small refusals that do fit: each request is gated on its
// own decision record, so a refusal written in between lets no large request through.
func TestSmallRecordsDoNotLetLargeRequestsThrough(t *testing.T) {
	a := &sizeLimited{limit: 600}
	e := newEnv(t, func(o *Options) { o.Auditor = a })
	up := newCountingUpstream(t, false)
	c := e.client(nil)
	long := "/allowed/" + strings.Repeat("x", 700)
	for i := range 5 {
		if status, body := do(c, "GET", up.srv.URL+long, ""); status != 503 || !strings.Contains(body, "audit.unavailable") {
			t.Errorf("large request %d: got %d %q, want 503 audit.unavailable", i, status, body)
		}
		if status, _ := do(c, "GET", up.srv.URL+"/denied", ""); status != 403 {
			t.Errorf("small refusal %d: got %d, want 403", i, status)
		}
	}
	if status, _ := do(c, "GET", up.srv.URL+"/allowed/small", ""); status != 200 {
		t.Errorf("a small allowed request: got %d, want 200 (its decision record fits)", status)
	}
	if n := up.requests.Load(); n != 1 {
		t.Errorf("the upstream received %d requests, want only the small allowed one", n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	refusals := 0
	for _, ev := range a.ev {
		if ev.Rule == "test.default" && ev.Status == 403 {
			refusals++
		}
		if strings.HasPrefix(ev.Path, "/allowed/x") {
			t.Errorf("a record of a large request was written: %+v", ev)
		}
	}
	if refusals != 5 {
		t.Errorf("got %d refusal records, want 5", refusals)
	}
}

// orderedRecorder records events and lets the upstream look at what was recorded when a
// request reaches it.
type orderedRecorder struct {
	mu sync.Mutex
	ev []audit.Event
}

func (r *orderedRecorder) Record(_ context.Context, ev *audit.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ev = append(r.ev, *ev)
	return nil
}

func (r *orderedRecorder) events() []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]audit.Event(nil), r.ev...)
}

// Every forwarded request (plain, intercepted, approved, tunnelled) has its decision record
// before the upstream sees it, and a completion record after with the same request id,
// the status and the bytes.
func TestDecisionRecordedBeforeForwardCompletionAfter(t *testing.T) {
	rec := &orderedRecorder{}
	e := newEnv(t, func(o *Options) { o.Auditor, o.Approver = rec, approveAll{} })
	plain, tlsUp := newCountingUpstream(t, false), newCountingUpstream(t, true)
	var missing atomic.Int64
	check := func(r *http.Request) {
		for _, ev := range rec.events() {
			if ev.Stage == audit.StageDecision && (ev.Path == r.URL.Path || ev.Kind == "connect") {
				return
			}
		}
		missing.Add(1)
	}
	plain.onReq, tlsUp.onReq = check, check
	c := e.client(nil)
	cases := []struct {
		name, method, url string
		client            *http.Client
		kind, decision    string
	}{
		{"plain", "GET", plain.srv.URL + "/allowed/plain", c, "request", "allow"},
		{"intercepted", "GET", tlsUp.srv.URL + "/allowed/mitm", c, "request", "allow"},
		{"approved write", "POST", plain.srv.URL + "/write", c, "request", "approve"},
		{"tunnel", "GET", localhostURL(tlsUp.srv, "/tunnelled"), tunnelClient(e, tlsUp.srv), "connect", "tunnel"},
	}
	for _, tc := range cases {
		if status, body := do(tc.client, tc.method, tc.url, "payload"); status != 200 {
			t.Fatalf("%s: got %d %q, want 200", tc.name, status, body)
		}
	}
	tunnelClient(e, tlsUp.srv).Transport.(*http.Transport).CloseIdleConnections()
	e.proxy.Shutdown(context.Background())
	if missing.Load() != 0 {
		t.Errorf("%d request(s) reached the upstream before their decision record", missing.Load())
	}
	// The tunnel's completion is written when the tunnel closes.
	var evs []audit.Event
	for range 100 {
		evs = rec.events()
		if n := countStage(evs, audit.StageCompletion); n >= len(cases) {
			break
		}
		waitABit()
	}
	for _, tc := range cases {
		var dec, comp *audit.Event
		var decAt, compAt int
		for i := range evs {
			ev := &evs[i]
			if string(ev.Kind) != tc.kind || string(ev.Decision) != tc.decision || (tc.kind == "request" && !strings.HasSuffix(tc.url, ev.Path)) {
				continue
			}
			switch ev.Stage {
			case audit.StageDecision:
				dec, decAt = ev, i
			case audit.StageCompletion:
				comp, compAt = ev, i
			}
		}
		if dec == nil || comp == nil {
			t.Errorf("%s: decision %v completion %v, want both", tc.name, dec != nil, comp != nil)
			continue
		}
		if dec.RequestID == "" || dec.RequestID != comp.RequestID || decAt > compAt {
			t.Errorf("%s: decision %q at %d, completion %q at %d: want one request id, decision first", tc.name, dec.RequestID, decAt, comp.RequestID, compAt)
		}
		if dec.Status != 0 || comp.Status != 200 || comp.BytesOut == 0 {
			t.Errorf("%s: decision status %d, completion status %d bytes out %d; want 0, 200, > 0", tc.name, dec.Status, comp.Status, comp.BytesOut)
		}
		if tc.decision == "approve" && (dec.ApprovalID != "appr-1" || dec.Approver != "alice") {
			t.Errorf("approved write: decision record names approval %q by %q, want appr-1 by alice", dec.ApprovalID, dec.Approver)
		}
	}
}

func countStage(evs []audit.Event, s audit.Stage) int {
	n := 0
	for _, ev := range evs {
		if ev.Stage == s {
			n++
		}
	}
	return n
}

// The proxy writing to a real signed sink leaves a log that verifies with the key and has
// a completion for every decision.
func TestSignedLogOfForwardedRequestsVerifies(t *testing.T) {
	dir := t.TempDir()
	key, pub := filepath.Join(dir, "audit.key"), filepath.Join(dir, "audit.pub")
	if err := audit.GenerateSigningKey(key, pub); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "audit.jsonl")
	sink, err := audit.Open(audit.Options{Path: path, SigningKeyFile: key, CheckpointEvents: 3})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(o *Options) { o.Auditor = sink })
	up := newCountingUpstream(t, false)
	c := e.client(nil)
	for i := range 4 {
		if status, _ := do(c, "GET", fmt.Sprintf("%s/allowed/%d", up.srv.URL, i), ""); status != 200 {
			t.Fatalf("request %d: %d", i, status)
		}
		do(c, "GET", up.srv.URL+"/denied", "")
	}
	e.proxy.Shutdown(context.Background())
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	pk, err := audit.LoadPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	r, err := audit.VerifyFiles(audit.VerifyOptions{Paths: []string{path}, PublicKey: pk, RequireSealed: true})
	if err != nil || r.Unfinished != 0 || r.Events != 12 {
		t.Errorf("verify: %v, %d events (want 12: 4 x decision+completion, 4 refusals), %d unfinished", err, r.Events, r.Unfinished)
	}
	f, _ := os.Open(path)
	defer f.Close()
	stages := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev audit.Event
		json.Unmarshal(sc.Bytes(), &ev)
		stages[string(ev.Stage)+"/"+string(ev.Kind)]++
	}
	if stages["decision/request"] != 4 || stages["completion/request"] != 4 || stages["/request"] != 4 {
		t.Errorf("got records %v, want 4 decisions, 4 completions, 4 single refusal records", stages)
	}
}

// waitABit paces a poll for something that happens when a connection closes.
func waitABit() { time.Sleep(10 * time.Millisecond) }

// countingAuditor passes records on and counts the completions accepted.
type countingAuditor struct {
	Auditor
	completions atomic.Int64
}

func (c *countingAuditor) Record(ctx context.Context, ev *audit.Event) error {
	err := c.Auditor.Record(ctx, ev)
	if err == nil && ev.Stage == audit.StageCompletion {
		c.completions.Add(1)
	}
	return err
}

// on_failure: buffer forwards requests while their records fit in the bounded buffer (they
// are lost if airlock stops before the log can be written again), then refuses.
func TestBufferModeForwardsUntilTheBufferIsFull(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	sink, err := audit.Open(audit.Options{Path: "/dev/full", OnFailure: audit.OnFailureBuffer, BufferEvents: 4})
	if err != nil {
		t.Fatal(err)
	}
	a := &countingAuditor{Auditor: sink}
	e := newEnv(t, func(o *Options) { o.Auditor = a })
	up := newCountingUpstream(t, false)
	c := e.client(nil)
	for i, want := range []int{200, 200, 503, 503} { // two records per request, four fit
		status, body := do(c, "GET", fmt.Sprintf("%s/allowed/%d", up.srv.URL, i), "")
		if status != want {
			t.Errorf("request %d: got %d %q, want %d", i, status, body, want)
		}
		// The completion is recorded as the response ends: wait for it before the next.
		for j := 0; j < 200 && status == 200 && a.completions.Load() < int64(i+1); j++ {
			waitABit()
		}
	}
	if n := up.requests.Load(); n != 2 {
		t.Errorf("the upstream received %d requests, want 2 (those whose records fit in the buffer)", n)
	}
	e.proxy.Shutdown(context.Background())
	if err := sink.Close(); err == nil || !strings.Contains(err.Error(), "4 buffered events were not written") {
		t.Errorf("Close: %v, want the 4 lost records reported", err)
	}
}
