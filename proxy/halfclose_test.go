package proxy

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/rego"
)

// waitingDecider answers only when its context ends, as a slow policy would.
type waitingDecider struct{}

func (waitingDecider) Decide(ctx context.Context, _ *rego.Input) (rego.Decision, error) {
	select {
	case <-ctx.Done():
		return rego.Decision{}, ctx.Err()
	case <-time.After(10 * time.Second):
		return rego.Decision{Action: rego.ActionDeny, Rule: "slow"}, nil
	}
}

// halfClose sends req on a new connection to the proxy and closes its sending half, as
// `printf ... | nc` does (once after has returned, when it is not nil), then reads what
// comes back.
func halfClose(t *testing.T, addr, req string, after func()) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	if after != nil {
		after()
	}
	c.(*net.TCPConn).CloseWrite()
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	var b bytes.Buffer
	b.ReadFrom(c)
	return b.String()
}

// TestClientClosedIsNotAFailure: a client that closes its sending half (or all of its
// connection) while the policy decides, or while the upstream has not answered, ends its
// request as 499 client_closed in the audit log (nothing sent upstream when the policy had not
// decided) and nothing logged as a policy or upstream error; the CI's compose stack had every such request
// logged as "policy evaluation failed" and answered 503.
func TestClientClosedIsNotAFailure(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Run("policy", func(t *testing.T) {
		e := newEnv(t, func(o *Options) { o.Decider, o.Logger = waitingDecider{}, logger })
		host := strings.TrimPrefix(e.http.URL, "http://")
		halfClose(t, e.addr, "GET "+e.http.URL+"/x HTTP/1.1\r\nHost: "+host+"\r\n\r\n", nil)
		evs := e.audit.WaitSince(0, 10*time.Second, func(evs []audit.Event) bool { return len(evs) > 0 })
		if len(evs) != 1 || evs[0].Status != statusClientClosed || evs[0].ErrorClass != "client_closed" {
			t.Fatalf("audit: %+v, want one event with status 499, class client_closed", evs)
		}
		select {
		case r := <-e.upstream:
			t.Fatalf("sent upstream: %s %s", r.Method, r.URL)
		default:
		}
	})
	t.Run("upstream", func(t *testing.T) {
		addr, bodies := stallingUpstream(t)
		e := newEnv(t, func(o *Options) { o.Logger = logger })
		// Closed once the policy has decided and the request is upstream.
		halfClose(t, e.addr, "GET http://"+addr+"/allowed/x HTTP/1.1\r\nHost: "+addr+"\r\n\r\n", func() { <-bodies })
		evs := e.audit.WaitSince(0, 10*time.Second, func(evs []audit.Event) bool { return len(evs) > 0 && evs[len(evs)-1].Status != 0 })
		last := evs[len(evs)-1]
		if last.Status != statusClientClosed || last.ErrorClass != "client_closed" || !strings.Contains(last.Reason, "before the upstream answered") {
			t.Fatalf("audit: %+v, want the request ended with status 499, class client_closed, while upstream", evs)
		}
	})
	if s := logs.String(); strings.Contains(s, "level=ERROR") {
		t.Errorf("a client that went away was logged as an error:\n%s", s)
	}
}

// TestClientClosedAfterForwardingIsNotNothingSent (red team): a client that closes its
// sending half once the upstream has its request (a write, body and all) made the completion
// record say "nothing was sent" with status 499, while the upstream had received every byte:
// a false trace of a write that happened. The record must not deny that the request went out.
func TestClientClosedAfterForwardingIsNotNothingSent(t *testing.T) {
	addr, bodies := stallingUpstream(t)
	e := newEnv(t)
	halfClose(t, e.addr, "GET http://"+addr+"/allowed/x HTTP/1.1\r\nHost: "+addr+"\r\nContent-Length: 5\r\n\r\nwrite", func() {
		if b := <-bodies; b != "write" { // the upstream acted on the whole request
			t.Errorf("upstream got body %q", b)
		}
	})
	evs := e.audit.WaitSince(0, 10*time.Second, func(evs []audit.Event) bool { return len(evs) > 1 && evs[len(evs)-1].Status != 0 })
	last := evs[len(evs)-1]
	if last.Status != statusClientClosed || last.ErrorClass != "client_closed" {
		t.Fatalf("audit: %+v, want the request ended with status 499, class client_closed", evs)
	}
	if strings.Contains(last.Reason, "nothing was sent") || last.BytesIn != 5 {
		t.Errorf("completion record %q (bytes in %d) denies a request the upstream received whole", last.Reason, last.BytesIn)
	}
}

// stallingUpstream is an upstream that reads each request's body, hands it over on bodies,
// and answers nothing until its client goes away or the test ends.
func stallingUpstream(t *testing.T) (addr string, bodies <-chan string) {
	t.Helper()
	stall, got := make(chan struct{}), make(chan string, 1)
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- string(b)
		select {
		case <-stall:
		case <-r.Context().Done():
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go up.Serve(ln)
	t.Cleanup(func() { close(stall); up.Close() })
	return ln.Addr().String(), got
}
