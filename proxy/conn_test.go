package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// tcpPair is a connected loopback pair: the accepted side wrapped as the proxy wraps
// connections (idle timeout idle), and the client side.
func tcpPair(t *testing.T, idle time.Duration) (*idleConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	il := newIdleListener(ln, idle, 4)
	t.Cleanup(func() { il.Close() })
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := il.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); c.Close() })
	return c.(*idleConn), client
}

// The idle deadline moves lazily (only once less than the idle timeout is left): a
// connection with traffic more often than the idle timeout stays open however long it
// lives, and a silent one is closed after the idle timeout, never sooner.
func TestIdleConnDeadlines(t *testing.T) {
	const idle = 300 * time.Millisecond
	t.Run("trickle keeps it open", func(t *testing.T) {
		c, client := tcpPair(t, idle)
		go func() {
			for range 10 {
				time.Sleep(idle / 3)
				if _, err := client.Write([]byte{'x'}); err != nil {
					return
				}
			}
		}()
		buf := make([]byte, 1)
		for i := range 10 { // 1 s of reads, more than three idle timeouts
			if _, err := c.Read(buf); err != nil {
				t.Fatalf("read %d of a connection with a byte every %s: %v", i, idle/3, err)
			}
		}
	})
	t.Run("silence closes it, not sooner", func(t *testing.T) {
		c, client := tcpPair(t, idle)
		client.Write([]byte{'x'})
		buf := make([]byte, 1)
		if _, err := c.Read(buf); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err := c.Read(buf)
		waited := time.Since(start)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read of a silent connection: %v, want a deadline error", err)
		}
		if waited < idle {
			t.Errorf("a silent connection timed out after %s, sooner than the idle timeout %s", waited, idle)
		}
		if !c.watch.timedOut.Load() {
			t.Error("the timeout was not noted for the server-refusal record")
		}
	})
	t.Run("a later deadline of the server's keeps the idle bound", func(t *testing.T) {
		// Red team: a deadline of the server's later than the idle timeout (its
		// ReadHeaderTimeout when that is the longer) was kept whole, and a silent client
		// held the connection until it.
		c, _ := tcpPair(t, idle)
		c.SetReadDeadline(time.Now().Add(20 * idle))
		buf := make([]byte, 1)
		done := make(chan error, 1)
		go func() { _, err := c.Read(buf); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read: %v", err)
			}
		case <-time.After(10 * idle):
			c.Close()
			t.Fatalf("a silent connection was still open after %s, ten times the idle timeout (the server's deadline was twenty)", 10*idle)
		}
	})
	t.Run("the server's earlier deadline wins", func(t *testing.T) {
		c, _ := tcpPair(t, time.Minute)
		buf := make([]byte, 1)
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		done := make(chan error, 1)
		go func() { _, err := c.Read(buf); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("read past the server's deadline: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the server's read deadline was not applied (the idle timeout is a minute)")
		}
		// Cleared by the server: reads wait on the idle timeout again, not the old deadline.
		c.SetReadDeadline(time.Time{})
		go func() { _, err := c.Read(buf); done <- err }()
		select {
		case err := <-done:
			t.Fatalf("read after the server cleared its deadline ended at once: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		c.Close()
		<-done
	})
}

// End to end (red team): with idle_timeout below read_header_timeout, a client that sends
// part of a request line and goes silent is closed at the idle timeout, not held (with
// its MaxConnsPerListener slot) for the whole ReadHeaderTimeout.
func TestSlowHeaderClosedAtIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	e := &env{}
	e.start(t, Options{Decider: e2etest.Engine(t, testPolicy),
		Limits: Limits{IdleTimeout: idle, ReadHeaderTimeout: 30 * time.Second}}, nil)
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET http://a.example/ HTTP/1.1\r\n")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	io.Copy(io.Discard, c) // until the proxy closes it
	if held := time.Since(start); held > 10*time.Second {
		t.Fatalf("a silent half-sent request held its connection %s; idle timeout %s, header timeout 30s", held, idle)
	}
}

// Red team: a plain-HTTP request whose response streams for longer than the idle timeout,
// to a client that has nothing more to send, was cut at the idle timeout without an error
// (net/http's background read of the client ran under the idle read deadline, timed out,
// and canceled the request). Writes now count as activity for reads too.
func TestStreamingResponseOutlivesIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 20; i++ { // 2s of output, a chunk every 100ms
			if _, err := w.Write([]byte("0123456789\n")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	}))
	t.Cleanup(up.Close)
	e := &env{}
	e.start(t, Options{Decider: panicky{rego.Decision{Action: rego.ActionAllow, Rule: "t.allow"}},
		Limits: Limits{IdleTimeout: idle}}, nil)
	c := e.client(nil)
	c.Timeout = 10 * time.Second
	resp, err := c.Get(up.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if len(b) != 20*11 {
		t.Fatalf("a live streaming response was cut after %d of %d bytes (err %v); idle timeout %s, a chunk every 100ms", len(b), 20*11, err, idle)
	}
}
