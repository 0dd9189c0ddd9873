package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// Nothing is forwarded without a record of its decision. The two ways out of the proxy
// each append that record first and go on only if the append succeeded:
//
//   - upstream.RoundTrip, the only path by which a request is sent upstream (allowed,
//     approved, or let through in report-only mode);
//   - dialTunnel, the only path by which a tunnel CONNECT reaches its target.
//
// The record is the request's own (its own append result gates it, never the sink's
// health), so an audit log that accepts small refusal records but not larger decision
// records still lets nothing through. The completion record (reqState.finish) repeats the
// request id once the exchange ends. An intercepted CONNECT forwards nothing itself: its
// one record is written before the tunnel is accepted, and each request inside it is
// recorded and gated on its own.

// tunnelStateKey carries a tunnel CONNECT's state from handleConnect to dialTunnel (goproxy
// dials with the CONNECT request it gave handleConnect).
type tunnelStateKey struct{}

// dialTunnel dials the target of a tunnel CONNECT once its decision record is written, and
// records the completion when the tunnel closes.
func (p *Proxy) dialTunnel(req *http.Request, network, addr string) (net.Conn, error) {
	st, ok := req.Context().Value(tunnelStateKey{}).(*reqState)
	if !ok {
		return nil, errors.New("tunnel without a policy decision") // never dialled
	}
	if err := st.recordDecision(); err != nil {
		return nil, err
	}
	c, err := p.guard.DialContext(req.Context(), network, addr)
	if err != nil {
		return nil, err
	}
	tc := &tunnelConn{Conn: c}
	tc.onClose = func() {
		st.ev.Status = http.StatusOK
		st.ev.BytesIn, st.ev.BytesOut = tc.out.Load(), tc.in.Load()
		_ = st.finish(context.Background())
	}
	return tc, nil
}

// tunnelConn counts a tunnel's bytes and records its completion when it closes. It keeps
// the half-close methods of a TCP connection, which goproxy uses to end each direction.
type tunnelConn struct {
	net.Conn
	in, out atomic.Int64 // bytes from and to the target
	once    sync.Once
	onClose func()
}

func (c *tunnelConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.in.Add(int64(n))
	return n, err
}

func (c *tunnelConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.out.Add(int64(n))
	return n, err
}

func (c *tunnelConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.onClose)
	return err
}

func (c *tunnelConn) CloseRead() error {
	if hc, ok := c.Conn.(interface{ CloseRead() error }); ok {
		return hc.CloseRead()
	}
	return nil
}

func (c *tunnelConn) CloseWrite() error {
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return nil
}
