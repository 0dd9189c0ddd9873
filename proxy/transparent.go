package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/internal/identity"
)

// Transparent egress: connections a sandbox makes to any address, which its network
// namespace redirects to a listener airlock holds there, and its DNS queries.
//
// A redirected connection carries the address the client asked for (SO_ORIGINAL_DST).
// When that is an address airlock's DNS gave out, it maps back to the name the client
// asked for; otherwise the client used an address literal, and the first bytes it sends
// name the host when they can (TLS SNI, HTTP Host). The connection then takes exactly the
// path of a CONNECT to that host and port from the same sandbox: the connect phase, then
// interception (TLS with airlock's CA, plain HTTP read as it is), each request's own
// phase, credentials, approvals and audit; or, with "tunnel": true, the bytes pass through
// uninspected and counted. A connection that is neither TLS nor HTTP is refused unless its
// decision tunnels it.

// literalPeek is how long a connection to an address literal may take to send its first
// bytes (a TLS ClientHello or an HTTP request line naming its host). After it the address
// itself is the host: protocols in which the server speaks first still work.
const literalPeek = 500 * time.Millisecond

// AttachTransparent serves redirected TCP connections on tcp and DNS on dns as sandbox
// id until detach is called. It implements sandbox.TransparentHost.
func (p *Proxy) AttachTransparent(tcp []net.Listener, dns []net.PacketConn, id identity.Identity) (detach func()) {
	names := newFakeNames()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]struct{}{}
	for _, pc := range dns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveDNS(pc, names)
		}()
	}
	for _, ln := range tcp {
		p.guard.AddSelf(ln.Addr())
		il := newIdleListener(ln, p.opts.Limits.IdleTimeout, p.opts.Limits.MaxConnsPerListener)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := il.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				open[c] = struct{}{}
				mu.Unlock()
				go func() {
					defer func() {
						// Nothing else recovers in this goroutine: a panic ends this
						// connection, not the process.
						if v := recover(); v != nil {
							p.logPanic(v)
							c.Close()
						}
					}()
					p.opts.Telemetry.ConnectionOpened()
					p.serveTransparent(ctx, c, id, names, func() {
						mu.Lock()
						delete(open, c)
						mu.Unlock()
						p.opts.Telemetry.ConnectionClosed()
					})
				}()
			}
		}()
	}
	return func() {
		cancel()
		for _, ln := range tcp {
			ln.Close()
		}
		for _, pc := range dns {
			pc.Close()
		}
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}
}

// serveTransparent hands one redirected connection to the CONNECT path.
func (p *Proxy) serveTransparent(ctx context.Context, c net.Conn, id identity.Identity, names *fakeNames, closed func()) {
	tc := &transparentConn{Conn: c, onClose: closed}
	orig, err := originalDst(c)
	li := &listenerInfo{bound: &id}
	base := context.WithValue(context.WithValue(ctx, listenerKey, li), connKey, net.Conn(tc))
	req := &http.Request{Method: http.MethodConnect, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, RemoteAddr: c.RemoteAddr().String(), URL: &url.URL{}}
	refuse := func(f refusal, host string) {
		req.Host, req.URL.Host = host, host
		r := req.WithContext(withIdentity(base, id))
		p.begin(r.Context(), r, id, "connect").refuse(r.Context(), f)
		tc.Close()
	}
	if err != nil {
		refuse(refusal{status: http.StatusBadRequest, decision: event.DecisionError, rule: "transparent.destination",
			reason: "airlock could not tell where this connection was going", class: "bad_request"}, "")
		return
	}
	port := int(orig.Port())
	addr := orig.Addr().Unmap()
	var host string
	switch {
	case addr.IsLoopback() || addr.IsUnspecified():
		// Only a client dialling the transparent listener itself gets here.
		refuse(refusal{status: http.StatusForbidden, decision: event.DecisionDeny, rule: "transparent.destination",
			reason: "the transparent listener is not a destination", class: "bad_request"}, orig.String())
		return
	case fakeRange.Contains(addr):
		name, ok := names.name(addr)
		if !ok {
			refuse(refusal{status: http.StatusForbidden, decision: event.DecisionDeny, rule: "transparent.destination",
				reason: "this address was not given out by airlock's DNS in this sandbox (an old answer?); resolve the name again",
				class:  "bad_request"}, orig.String())
			return
		}
		host = name
	default:
		host = addr.String()
		if name := tc.sniffHost(literalPeek, p.opts.Limits.MaxHeaderBytes); name != "" {
			host = name
		}
	}
	target := joinHostPort(host, port)
	req.Host, req.URL.Host = target, target
	r := req.WithContext(context.WithValue(base, transparentKey{}, tc))
	p.serveHTTP(&hijackWriter{conn: tc}, r)
}

type transparentKey struct{}

// transparentClassify is the hook of handleConnect for a transparent connection that is to
// be intercepted: a refusal when its first bytes are neither TLS nor HTTP.
func (p *Proxy) transparentClassify(ctx context.Context) *refusal {
	tc, ok := ctx.Value(transparentKey{}).(*transparentConn)
	if !ok {
		return nil
	}
	switch tc.classify(p.opts.Limits.ReadHeaderTimeout) {
	case kindTLS, kindHTTP:
		return nil
	}
	return &refusal{status: http.StatusForbidden, decision: event.DecisionDeny, rule: "transparent.protocol",
		reason: "only TLS and HTTP are inspected on a transparent connection; other protocols need a connect decision with tunnel: true",
		class:  "policy"}
}

// transparentConn is a redirected client connection seen through the CONNECT path: bytes
// read ahead to classify it are replayed first, and the answer to the synthesised CONNECT
// is not sent to the client (a refusal closes the connection; for plain HTTP it is sent,
// since an HTTP client can read it).
type transparentConn struct {
	net.Conn
	onClose func()
	once    sync.Once

	pending []byte // read ahead, not yet returned by Read
	kind    connKind

	mu     sync.Mutex
	head   []byte // the CONNECT answer so far
	passed bool   // the answer is consumed: writes go to the client
	refuse bool   // the answer was a refusal
}

func (c *transparentConn) Read(b []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

func (c *transparentConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	if c.passed {
		c.mu.Unlock()
		return c.Conn.Write(b)
	}
	if c.refuse {
		c.mu.Unlock()
		return c.writeRefusal(b)
	}
	c.head = append(c.head, b...)
	i := bytes.Index(c.head, []byte("\r\n\r\n"))
	if i < 0 {
		if len(c.head) > 4096 {
			c.refuse = true
		}
		c.mu.Unlock()
		return len(b), nil
	}
	rest := c.head[i+4:]
	if bytes.HasPrefix(c.head, []byte("HTTP/1.1 200 ")) || bytes.HasPrefix(c.head, []byte("HTTP/1.0 200 ")) {
		c.passed = true
		c.head = nil
		c.mu.Unlock()
		if len(rest) > 0 {
			if _, err := c.Conn.Write(rest); err != nil {
				return 0, err
			}
		}
		return len(b), nil
	}
	c.refuse = true
	head := c.head
	c.head = nil
	c.mu.Unlock()
	if _, err := c.writeRefusal(head); err != nil {
		return 0, err
	}
	return len(b), nil
}

// writeRefusal passes a refusal to a plain HTTP client; anything else never sees it.
func (c *transparentConn) writeRefusal(b []byte) (int, error) {
	if c.kind == kindHTTP {
		return c.Conn.Write(b)
	}
	return len(b), nil
}

func (c *transparentConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.onClose)
	return err
}

func (c *transparentConn) CloseWrite() error {
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return c.Close()
}

func (c *transparentConn) CloseRead() error {
	if hc, ok := c.Conn.(interface{ CloseRead() error }); ok {
		return hc.CloseRead()
	}
	return nil
}

// SyscallConn exposes the socket, for the check that a held request's client is still there.
func (c *transparentConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := rawConn(c.Conn).(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

func rawConn(c net.Conn) net.Conn {
	for {
		switch x := c.(type) {
		case *idleConn:
			c = x.Conn
		case *transparentConn:
			c = x.Conn
		default:
			return c
		}
	}
}

// hijackWriter is the ResponseWriter of a synthesised CONNECT: goproxy hijacks it.
type hijackWriter struct {
	conn   net.Conn
	header http.Header
}

func (w *hijackWriter) Header() http.Header {
	if w.header == nil {
		w.header = http.Header{}
	}
	return w.header
}

// Write and WriteHeader are used only for answers that never reach a hijacked
// connection (goproxy answers CONNECT on the hijacked connection); they go nowhere.
func (w *hijackWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *hijackWriter) WriteHeader(int)             {}

func (w *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return w.conn, bufio.NewReadWriter(bufio.NewReader(w.conn), bufio.NewWriter(w.conn)), nil
}

// originalDst is the destination a redirected connection was addressed to.
func originalDst(c net.Conn) (netip.AddrPort, error) {
	sc, ok := rawConn(c).(syscall.Conn)
	if !ok {
		return netip.AddrPort{}, errors.New("not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var ap netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		ap, serr = getOriginalDst(int(fd))
	})
	if err != nil {
		return netip.AddrPort{}, err
	}
	return ap, serr
}
