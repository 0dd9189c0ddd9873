package proxy

import (
	"net"
	"sync"
	"time"
)

// idleListener wraps accepted connections so that a connection on which nothing is read or
// written for the idle timeout is closed, also after it was hijacked for a tunnel (where
// http.Server's own timeouts no longer apply). A slow-loris or slow-read client thus holds
// a connection for at most the idle timeout per byte it trickles.
//
// It also bounds the connections open at once: Accept waits while max are open.
type idleListener struct {
	net.Listener
	idle time.Duration
	sem  chan struct{}
	done chan struct{}
	once sync.Once
}

func newIdleListener(ln net.Listener, idle time.Duration, max int) *idleListener {
	return &idleListener{Listener: ln, idle: idle, sem: make(chan struct{}, max), done: make(chan struct{})}
}

func (l *idleListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

func (l *idleListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &idleConn{Conn: c, idle: l.idle, release: func() { <-l.sem }}, nil
}

type idleConn struct {
	net.Conn
	idle    time.Duration
	release func()
	once    sync.Once
	watch   serverWatch

	mu            sync.Mutex
	readDeadline  time.Time // set by the HTTP server; zero when none
	writeDeadline time.Time
	readArmed     time.Time // the deadline the connection has for reads (zero: none)
	writeArmed    time.Time
}

// arm keeps the connection's deadline for one direction (*armed) at the earlier of set
// (the HTTP server's own deadline, zero when none) and the idle timeout from now. Setting
// a deadline costs a timer update in the runtime, and reads and writes come many to a
// request: the idle deadline is moved only once it is less than the idle timeout away (or
// further than 17/16 of it, as a later deadline of the server's leaves it), and then to
// 17/16 of the idle timeout, so a silent connection is closed after between idle and 17/16
// idle, never sooner and never later.
func (c *idleConn) arm(now time.Time, armed *time.Time, set time.Time, apply func(time.Time) error) {
	lo, hi := now.Add(c.idle), now.Add(c.idle+c.idle/16)
	if !set.IsZero() && !set.After(lo) {
		// The server's deadline comes first.
		if !armed.Equal(set) {
			*armed = set
			_ = apply(set)
		}
		return
	}
	if !set.IsZero() && set.Before(hi) {
		hi = set
	}
	if !armed.IsZero() && !armed.Before(lo) && !armed.After(hi) {
		return
	}
	*armed = hi
	_ = apply(hi)
}

// touch counts activity on the connection, or on the exchange it serves (bytes of its
// response arriving from upstream), for both directions.
func (c *idleConn) touch() {
	now := time.Now()
	c.mu.Lock()
	c.arm(now, &c.readArmed, c.readDeadline, c.Conn.SetReadDeadline)
	c.arm(now, &c.writeArmed, c.writeDeadline, c.Conn.SetWriteDeadline)
	c.mu.Unlock()
}

func (c *idleConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// Read and Write each count as activity for both directions, and so does a response's
// body arriving from upstream (touch): a response streaming to a client with nothing more
// to send keeps the connection (red team: net/http's background read of the client,
// pending while a response streamed, hit the idle deadline and canceled the request
// mid-stream, cutting the body without an error).
func (c *idleConn) Read(b []byte) (int, error) {
	c.touch()
	n, err := c.Conn.Read(b)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		c.watch.timedOut.Store(true)
	}
	return n, err
}

func (c *idleConn) Write(b []byte) (int, error) {
	c.touch()
	c.watch.wrote(b)
	return c.Conn.Write(b)
}

func (c *idleConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readDeadline, c.writeDeadline = t, t
	c.readArmed, c.writeArmed = t, t
	return c.Conn.SetDeadline(t)
}

func (c *idleConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readDeadline, c.readArmed = t, t
	return c.Conn.SetReadDeadline(t)
}

func (c *idleConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeDeadline, c.writeArmed = t, t
	return c.Conn.SetWriteDeadline(t)
}

// CloseWrite and CloseRead let tunnels half-close, as goproxy does for TCP connections.
func (c *idleConn) CloseWrite() error {
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return c.Conn.Close()
}

func (c *idleConn) CloseRead() error {
	if hc, ok := c.Conn.(interface{ CloseRead() error }); ok {
		return hc.CloseRead()
	}
	return nil
}

// inflight counts concurrent requests per sandbox.
type inflight struct {
	mu sync.Mutex
	n  map[string]int
}

func (f *inflight) acquire(id string, max int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[string]int{}
	}
	if f.n[id] >= max {
		return false
	}
	f.n[id]++
	return true
}

func (f *inflight) release(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n[id] <= 1 {
		delete(f.n, id)
		return
	}
	f.n[id]--
}
