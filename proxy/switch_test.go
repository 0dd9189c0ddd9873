package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/internal/identity"
)

// switchingUpstream answers every request with a 101 (Upgrade: upgrade) and reports, for
// each connection, the request's Upgrade header and then what it read after the 101 until
// airlock closed the connection (or 10 s passed).
type switched struct {
	asked string
	after string
	ended bool
}

func switchingUpstream(t *testing.T, upgrade string) (addr string, got chan switched) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got = make(chan switched, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: "+upgrade+"\r\nConnection: Upgrade\r\n\r\n")
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				b, err := io.ReadAll(br)
				got <- switched{asked: req.Header.Get("Upgrade"), after: string(b), ended: err == nil}
			}(c)
		}
	}()
	return ln.Addr().String(), got
}

func sendThroughProxy(t *testing.T, e *env, tok, target, upgrade string) (net.Conn, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "http://"+target+"/allowed/x", nil)
	req.Header.Set("Proxy-Authorization", "Basic "+basic("sbx-a", tok))
	if upgrade != "" {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", upgrade)
	}
	if err := req.WriteProxy(c); err != nil {
		t.Fatal(err)
	}
	wait := 5 * time.Second
	if upgrade != "" {
		wait = time.Second // a non-WebSocket 101 is not flushed to the client: no answer to wait for
	}
	c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return c, nil
	}
	return c, resp
}

// A 101 the request did not ask for is refused (red team: a hostile upstream's unasked
// "101, Upgrade: websocket" gave the sandbox a raw pipe past the policy, recorded as a GET).
func TestUnaskedSwitchingProtocolsRefused(t *testing.T) {
	e := newEnv(t)
	target, got := switchingUpstream(t, "websocket")
	tok := mustIssue(t, e.proxy, identity.Identity{ID: "sbx-a"})
	c, resp := sendThroughProxy(t, e, tok, target, "")
	defer c.Close()
	if resp == nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("unasked 101: response %v, want 502", resp)
	}
	io.WriteString(c, "POST /write HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nsecret")
	select {
	case s := <-got:
		if s.asked != "" || s.after != "" || !s.ended {
			t.Errorf("upstream: asked %q, read %q after its 101, closed by airlock %v; want nothing read and the connection closed", s.asked, s.after, s.ended)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the upstream connection stayed open")
	}
	var found bool
	for _, ev := range e.audit.Events() {
		if ev.Decision == event.DecisionError && ev.Rule == "upstream" && ev.Status == http.StatusBadGateway {
			found = true
		}
	}
	if !found {
		t.Errorf("no error record of rule upstream with status 502: %+v", e.audit.Events())
	}
}

// An asked-for upgrade lives as long as the sandbox's side: when the sandbox hangs up, the
// upstream connection is closed too (red team: a silent upstream held each connection and
// its goroutines for ever, past limits.max_in_flight_per_sandbox).
func TestUpgradedStreamEndsWithTheSandbox(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Limits.MaxInFlightPerSandbox = 1 })
	target, got := switchingUpstream(t, "x-test")
	tok := mustIssue(t, e.proxy, identity.Identity{ID: "sbx-a"})
	const n = 5
	for i := 0; i < n; i++ {
		c, _ := sendThroughProxy(t, e, tok, target, "x-test")
		time.Sleep(100 * time.Millisecond)
		c.Close()
	}
	for i := 0; i < n; i++ {
		select {
		case s := <-got:
			if s.asked != "x-test" || !s.ended {
				t.Errorf("upstream %d: asked %q, closed by airlock %v", i, s.asked, s.ended)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%d of %d upgraded upstream connections still open after the sandbox hung up", n-i, n)
		}
	}
}
