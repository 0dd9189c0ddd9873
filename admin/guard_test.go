package admin

import (
	"bufio"
	"context"
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
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/airlock-proxy/airlock/approval"
)

const approverToken = "approver-token-0123456789abcdef"

// approvals is a real approval service on SQLite with one approver, oncall.
func approvals(t *testing.T) *approval.Service {
	t.Helper()
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "oncall.token")
	if err := os.WriteFile(tokFile, []byte(approverToken), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := approval.New(context.Background(), approval.Options{Config: approval.Config{
		Store:     "sqlite:" + filepath.Join(dir, "approvals.db"),
		Approvers: []approval.ApproverConfig{{Name: "oncall", TokenFile: tokFile}},
	}.WithDefaults()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// adminWith is the admin handler with policy status, metrics and the approvals routes.
func adminWith(t *testing.T, o Options) http.Handler {
	t.Helper()
	o.PolicyStatus = func() any { return map[string]string{"revision": "r1"} }
	o.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "m 1\n") })
	s := approvals(t)
	o.Mount = append(o.Mount, s.Routes)
	return New(o)
}

// TestHostGuard: the admin API answers only Host values that name it (IP addresses,
// localhost, admin.hosts), on every route, so a page that rebinds its DNS name to the
// admin listener cannot use an operator's browser to read or post anything.
func TestHostGuard(t *testing.T) {
	srv := httptest.NewServer(adminWith(t, Options{Hosts: []string{"airlock-admin.airlock.svc", "Airlock", "airlock-admin.airlock.svc.cluster.local."}}))
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	allowed := []string{
		srv.Listener.Addr().String(), "127.0.0.1", "[::1]:9090", "[::1]", "localhost", "LOCALHOST:9090", "localhost.",
		fmt.Sprintf("localhost:%d", port), "10.1.2.3:9090" /* a pod IP: kubelet probes */, "172.30.1.10",
		"airlock-admin.airlock.svc:9090", "AIRLOCK-ADMIN.airlock.svc", "airlock", "airlock:9090",
		"airlock-admin.airlock.svc.cluster.local",
	}
	refused := []string{
		"evil.example", "evil.example:9090", fmt.Sprintf("evil.example:%d", port), "localhost.evil.example",
		"127.0.0.1.nip.io", "airlock-admin.airlock.svc.evil.example", "evil-airlock", "airlock.evil.example",
		"0x7f000001", "127.1", "[::1].evil.example", "a..b",
	}
	routes := []struct{ method, path, body string }{
		{"GET", "/healthz", ""}, {"GET", "/v1/policy", ""}, {"GET", "/metrics", ""},
		{"POST", "/approvals/login", "token=x"}, {"GET", "/v1/approvals", ""},
	}
	for _, rt := range routes {
		for _, host := range append(allowed, refused...) {
			req, _ := http.NewRequest(rt.method, srv.URL+rt.path, strings.NewReader(rt.body))
			req.Host = host
			if rt.body != "" {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			isRefused := resp.StatusCode == http.StatusMisdirectedRequest
			wantRefused := !containsStr(allowed, host)
			if isRefused != wantRefused {
				t.Errorf("%s %s with Host %q: %d %s; want refused=%v", rt.method, rt.path, host, resp.StatusCode, b, wantRefused)
			}
			if isRefused && !strings.Contains(string(b), "admin.hosts") {
				t.Errorf("refusal for Host %q does not say what to do: %s", host, b)
			}
		}
	}
	// No Host at all (HTTP/1.0): refused too.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprint(conn, "GET /v1/policy HTTP/1.0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("request without Host: %d, want 421", resp.StatusCode)
	}
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestBodyLimit: every route's body is bounded: 413 when Content-Length says too much,
// and when a body of unknown length (chunked) turns out too large; the unauthenticated
// login form included.
func TestBodyLimit(t *testing.T) {
	const limit = 1 << 10
	var got int
	echo := func(r chi.Router) {
		r.Post("/echo", func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("handler read: %v", err)
			}
			got = len(b)
			w.WriteHeader(http.StatusNoContent)
		})
	}
	small := httptest.NewServer(adminWith(t, Options{MaxBodyBytes: limit, Mount: []func(chi.Router){echo}}))
	t.Cleanup(small.Close)
	def := httptest.NewServer(adminWith(t, Options{}))
	t.Cleanup(def.Close)

	post := func(u string, body io.Reader, chunked bool, ctype string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", u, body)
		if chunked {
			req.ContentLength = -1
			req.Body = io.NopCloser(body) // hide the length
		}
		req.Header.Set("Content-Type", ctype)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			// The server may close the connection while a large body is still being sent.
			var ne net.Error
			if errors.As(err, &ne) || strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "broken pipe") {
				return -1, err.Error()
			}
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, chunked := range []bool{false, true} {
		name := map[bool]string{false: "with Content-Length", true: "chunked"}[chunked]
		t.Run(name, func(t *testing.T) {
			got = -1
			if code, _ := post(small.URL+"/echo", strings.NewReader(strings.Repeat("a", limit)), chunked, "text/plain"); code != 204 || got != limit {
				t.Errorf("body of exactly the limit: %d, handler read %d; want 204 and %d bytes", code, got, limit)
			}
			got = -1
			code, body := post(small.URL+"/echo", strings.NewReader(strings.Repeat("a", limit+1)), chunked, "text/plain")
			if code != 413 || !strings.Contains(body, "admin.max_body_bytes") || got != -1 {
				t.Errorf("body one byte over: %d %s (handler read %d); want 413 naming admin.max_body_bytes before the handler runs", code, body, got)
			}
			// The login form, at the default limit (1 MiB): 10 MB posts are refused.
			form := "token=" + strings.Repeat("x", 10<<20)
			if code, body := post(def.URL+"/approvals/login", strings.NewReader(form), chunked, "application/x-www-form-urlencoded"); code != 413 && code != -1 {
				t.Errorf("10 MB login form: %d %.200s, want 413", code, body)
			}
			// A small form still reaches the handler.
			if code, _ := post(def.URL+"/approvals/login", strings.NewReader("token=wrong"), chunked, "application/x-www-form-urlencoded"); code != http.StatusForbidden {
				t.Errorf("small login form: %d, want 403 (wrong token)", code)
			}
		})
	}
}

// TestServerBounds: a client that sends its headers or its body too slowly is cut off.
func TestServerBounds(t *testing.T) {
	h := adminWith(t, Options{})
	srv := httptest.NewUnstartedServer(h)
	srv.Config = NewServer(h, ServerLimits{ReadHeaderTimeout: 100 * time.Millisecond, ReadTimeout: 300 * time.Millisecond})
	srv.Start()
	t.Cleanup(srv.Close)
	for name, partial := range map[string]string{
		"slow headers": "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: ",
		"slow body":    "POST /approvals/login HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\ntoken=",
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, partial); err != nil {
				t.Fatal(err)
			}
			// The server must give up on its own; the deadline only keeps a broken test
			// from hanging.
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			_, err = io.ReadAll(conn)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("the server kept a %s connection open", name)
			}
		})
	}
	s := NewServer(h, ServerLimits{})
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 || s.MaxHeaderBytes > 1<<20 {
		t.Errorf("default admin server %+v: want every timeout and a header bound", s)
	}
}

// TestStreamOutlivesServerTimeouts: the approvals event stream keeps delivering after the
// server's read and write timeouts have passed (it lifts its own deadlines).
func TestStreamOutlivesServerTimeouts(t *testing.T) {
	svc := approvals(t)
	h := New(Options{Mount: []func(chi.Router){svc.Routes}})
	srv := httptest.NewUnstartedServer(h)
	srv.Config = NewServer(h, ServerLimits{ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	srv.Start()
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/approvals/stream", nil)
	req.Header.Set("Authorization", "Bearer "+approverToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	time.Sleep(time.Second) // well past both timeouts
	held := make(chan error, 1)
	go func() {
		_, err := svc.Hold(ctx, approval.Request{SandboxID: "sbx-1", Method: "POST", URL: "https://api.example/x", Rule: "r", Reason: "test", Timeout: time.Minute})
		held <- err
	}()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if strings.HasPrefix(lines.Text(), "event: "+approval.EventCreated) {
			return
		}
	}
	t.Errorf("stream ended before the event: %v", lines.Err())
}

// TestReadyzRedacts: a failing check's text is redacted before it is shown.
func TestReadyzRedacts(t *testing.T) {
	h := New(Options{Ready: map[string]Check{"store": func(context.Context) error {
		return &url.Error{Op: "Get", URL: "https://u:CANARY1@db.example/?token=CANARY2", Err: errors.New("refused")}
	}}})
	rr := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/readyz", nil)
	req.Host = "localhost"
	h.ServeHTTP(rr, req)
	if rr.Code != 503 || strings.Contains(rr.Body.String(), "CANARY") || !strings.Contains(rr.Body.String(), "db.example") {
		t.Errorf("/readyz: %d %s, want 503 naming the host without the canaries", rr.Code, rr.Body)
	}
}
