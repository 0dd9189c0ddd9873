package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/internal/identity"
)

// TestHoldBudgets: one sandbox at its bounds (requests waiting, body bytes held) is refused
// with 429 / 413 saying which bound, before its body is read; another sandbox's held request
// is not touched and still goes through; the total bound refuses whoever passes it; decided
// requests free their budget.
func TestHoldBudgets(t *testing.T) {
	svc := approvals(t, approval.Config{})
	e := newEnv(t, withApprover(svc), func(o *Options) {
		o.Limits.MaxHeldPerSandbox = 2
		o.Limits.MaxHeldBytesPerSandbox = 64 << 10
		o.Limits.MaxHeldBytes = 100 << 10
	})
	ctx := context.Background()
	tokA := mustIssue(t, e.proxy, identity.Identity{ID: "sbx-a"})
	tokB := mustIssue(t, e.proxy, identity.Identity{ID: "sbx-b"})
	a, b := e.client(url.UserPassword("sbx-a", tokA)), e.client(url.UserPassword("sbx-b", tokB))
	post := func(c *http.Client, base string, n int, tag string) *http.Request {
		r, _ := http.NewRequest("POST", base+"/write?tag="+tag, bytes.NewReader(bytes.Repeat([]byte("x"), n)))
		return r
	}

	// sbx-a: two waiting (40 KiB + 1 KiB), a third is refused 429 whatever its size.
	a1 := send(a, post(a, e.https.URL, 40<<10, "a1"))
	waitPending(t, svc, 1)
	a2 := send(a, post(a, e.http.URL, 1<<10, "a2"))
	waitPending(t, svc, 2)
	r := wait(t, send(a, post(a, e.https.URL, 10, "a3")))
	if r.status != http.StatusTooManyRequests || r.header.Get("X-Airlock-Rule") != "limits.held" || r.header.Get("Retry-After") == "" {
		t.Errorf("third waiting request of sbx-a: got %d rule %q, want 429 limits.held with Retry-After (%s)", r.status, r.header.Get("X-Airlock-Rule"), r.body)
	}

	// sbx-b is not affected: its request is held and approved.
	b1 := send(b, post(b, e.https.URL, 30<<10, "b1"))
	recs := waitPending(t, svc, 3)
	if recs[0].Sandbox != "sbx-b" {
		t.Fatalf("newest pending: got %s, want sbx-b's", recs[0].Sandbox)
	}
	// Now 71 KiB are held in all: sbx-b's next 30 KiB passes its own bound but not the total.
	r = wait(t, send(b, post(b, e.http.URL, 30<<10, "b2")))
	if r.status != http.StatusRequestEntityTooLarge || r.header.Get("X-Airlock-Rule") != "limits.held_bytes_total" {
		t.Errorf("sbx-b past the total bound: got %d rule %q, want 413 limits.held_bytes_total", r.status, r.header.Get("X-Airlock-Rule"))
	}
	if _, err := svc.Decide(ctx, recs[0].ID, approval.StateApproved, "oncall", ""); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, b1); r.status != 200 {
		t.Errorf("sbx-b's held request while sbx-a is at its bounds: got %d %s, want 200", r.status, r.body)
	}

	// Decide a2: sbx-a has one waiting (40 KiB); 30 KiB more would pass its 64 KiB: refused
	// with 413 before any of it is buffered. A client that sends its whole body before
	// reading, on a connection it closes (as Python's urllib does), still reads the 413.
	for _, rec := range waitPending(t, svc, 2) {
		if strings.Contains(rec.URL, "tag=a2") {
			svc.Decide(ctx, rec.ID, approval.StateDenied, "oncall", "")
		}
	}
	wait(t, a2)
	waitPending(t, svc, 1)
	target := strings.TrimPrefix(e.https.URL, "https://")
	tc := e.rawTunnel(t, target, "sbx-a", tokA)
	fmt.Fprintf(tc, "POST /write?tag=a4 HTTP/1.1\r\nHost: %s\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", target, 30<<10, bytes.Repeat([]byte("y"), 30<<10))
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatalf("no answer to a whole body sent before reading: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || resp.Header.Get("X-Airlock-Rule") != "limits.held_bytes" {
		t.Errorf("sbx-a past its byte bound: got %d rule %q, want 413 limits.held_bytes", resp.StatusCode, resp.Header.Get("X-Airlock-Rule"))
	}
	// A chunked body (no length given) is refused as it passes the bound.
	chunked := post(a, e.https.URL, 0, "a5")
	chunked.Body = io.NopCloser(io.LimitReader(zeros{}, 30<<10))
	chunked.ContentLength = -1
	if r := wait(t, send(a, chunked)); r.status != http.StatusRequestEntityTooLarge || r.header.Get("X-Airlock-Rule") != "limits.held_bytes" {
		t.Errorf("chunked body past sbx-a's bound: got %d rule %q, want 413 limits.held_bytes", r.status, r.header.Get("X-Airlock-Rule"))
	}
	if p, held, _ := e.proxy.held.usage("sbx-a"); p != 1 || held != 40<<10 {
		t.Errorf("sbx-a's budget after refusals: %d waiting, %d bytes; want 1 and %d (refusals reserve nothing)", p, held, 40<<10)
	}

	// Once decided, the budget is free again.
	rec := waitPending(t, svc, 1)[0]
	svc.Decide(ctx, rec.ID, approval.StateDenied, "oncall", "")
	wait(t, a1)
	if p, held, total := e.proxy.held.usage("sbx-a"); p != 0 || held != 0 || total != 0 {
		t.Errorf("budget after every request ended: %d waiting, %d bytes, %d total; want all 0", p, held, total)
	}
	a6 := send(a, post(a, e.https.URL, 60<<10, "a6"))
	rec = waitPending(t, svc, 1)[0]
	svc.Decide(ctx, rec.ID, approval.StateApproved, "oncall", "")
	if r := wait(t, a6); r.status != 200 {
		t.Errorf("sbx-a after its requests were decided: got %d, want 200", r.status)
	}
	var refused int
	for _, ev := range e.audit.Events() {
		if strings.HasPrefix(ev.Rule, "limits.held") {
			refused++
			if ev.Decision != "deny" || ev.ErrorClass != "limit" {
				t.Errorf("audit of a budget refusal: decision %q class %q", ev.Decision, ev.ErrorClass)
			}
		}
	}
	if refused != 4 {
		t.Errorf("budget refusals in the audit log: got %d, want 4 (429, total, bytes, chunked bytes)", refused)
	}
}

// rawTunnel opens an intercepted CONNECT to target as sandbox id and returns the TLS
// connection inside it, for writing requests byte by byte.
func (e *env) rawTunnel(t *testing.T, target, id, tok string) *tls.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", target, target, basic(id, tok))
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(e.ca.Certificate())
	host, _, _ := net.SplitHostPort(target)
	tc := tls.Client(conn, &tls.Config{RootCAs: roots, ServerName: host, NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS in the tunnel: %v", err)
	}
	return tc
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func basic(user, pass string) string {
	r, _ := http.NewRequest("GET", "http://x/", nil)
	r.SetBasicAuth(user, pass)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}
