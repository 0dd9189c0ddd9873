package proxy

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/internal/identity"
)

// The HTTP server answers some requests itself, before any handler sees them: malformed
// framing or header lines (400), headers over MaxHeaderBytes (431), a transfer coding it
// does not know (501), or a request not complete within ReadHeaderTimeout (the connection
// is closed). serverWatch notes, per connection, what the server wrote while no handler
// ran, so that each such refusal is recorded as an audit event like any other.
type serverWatch struct {
	active   atomic.Bool  // the server is reading or serving a request on this connection
	served   atomic.Bool  // a handler took the current request
	status   atomic.Int32 // a status line the server wrote itself
	timedOut atomic.Bool  // a read on the connection hit its deadline
}

// begin is called once the server has read a request's first bytes (or failed reading it:
// a timeout seen during that read stays noted, and ends the connection anyway).
func (w *serverWatch) begin() {
	w.served.Store(false)
	w.status.Store(0)
	w.active.Store(true)
}

// wrote looks at bytes written to the client; a status line written while no handler runs
// is the server's own refusal.
func (w *serverWatch) wrote(b []byte) {
	if !w.active.Load() || w.served.Load() || w.status.Load() != 0 {
		return
	}
	if !bytes.HasPrefix(b, []byte("HTTP/1.")) || len(b) < 12 {
		return
	}
	if code, err := strconv.Atoi(string(b[9:12])); err == nil {
		w.status.Store(int32(code))
	}
}

// connState follows the server's view of a connection; on close, a request that was being
// read but never reached a handler is recorded.
func (p *Proxy) connState(li *listenerInfo, c *idleConn, s http.ConnState) {
	switch s {
	case http.StateActive:
		c.watch.begin()
	case http.StateIdle, http.StateHijacked:
		c.watch.active.Store(false)
	case http.StateClosed:
		if c.watch.active.Load() && !c.watch.served.Load() {
			p.recordServerRefusal(li, int(c.watch.status.Load()), c.watch.timedOut.Load())
		}
	}
}

// recordServerRefusal records a request the HTTP server refused itself, through the same
// owner as every other refusal.
func (p *Proxy) recordServerRefusal(li *listenerInfo, status int, timedOut bool) {
	if p.opts.Auditor == nil {
		return
	}
	id := identity.Identity{ID: "unknown"}
	if li != nil && li.bound != nil {
		id = *li.bound
	}
	f := refusal{status: status, decision: event.DecisionError, rule: "protocol", class: "bad_request"}
	switch {
	case status == http.StatusRequestHeaderFieldsTooLarge:
		f.rule, f.class = "limits.header", "limit"
		f.reason = "the request headers exceed the proxy's limit; nothing was sent"
	case status != 0:
		f.reason = "the request was malformed (" + strconv.Itoa(status) + " " + http.StatusText(status) + ") and refused before it was read; nothing was sent"
	case timedOut:
		f.status, f.rule, f.class = http.StatusRequestTimeout, "limits.timeout", "timeout"
		f.reason = "the request was not complete within the read timeout; the connection was closed and nothing was sent"
	default:
		f.reason = "the client closed the connection before a complete request was read; nothing was sent"
	}
	p.beginUnread(id).refuse(context.Background(), f)
}
