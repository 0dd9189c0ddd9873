package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
)

// h1Transport sends the common request, a GET or HEAD with no body to a plain-HTTP
// upstream or to an HTTPS one known to speak HTTP/1.1 only, on the calling goroutine: it
// writes the request and reads the response on the connection itself. net/http's
// Transport hands every request to a connection's writing goroutine and the response back
// from its reading goroutine, two wake-ups per request that cost more CPU than anything
// airlock adds (docs/performance.md, "Seventh pass"). Every other request (a body, an
// upgrade, an HTTPS upstream that speaks h2 or has not answered yet, an approved request,
// a parent proxy) goes through net/http's Transport as before.
//
// It keeps what the Transport promises a proxy: the same dial (the dial guard) and TLS
// (upstreamTLS), the request written by net/http's own Request.Write after the
// Transport's header checks, Accept-Encoding: gzip offered and undone as the Transport
// does, response headers bounded (10 MiB) and timed (UpstreamHeaderTimeout), 1xx answers
// skipped, and a connection reused only when its previous response was read to the end,
// neither side asked to close it, and nothing arrived on it while it was idle (bytes an
// upstream sent unasked are never taken for the next request's answer; over TLS, the part
// of a record that has not completed is inside crypto/tls, beyond reach, as it is for the
// Transport, and only the upstream itself can send it). A reused connection that turns
// out closed before any byte of the answer is retried once, on a new connection, so a
// request reaches an upstream twice at most.
type h1Transport struct {
	dial          func(ctx context.Context, network, addr string) (net.Conn, error)
	tls           *upstreamTLS  // for HTTPS upstreams, as for the Transport's
	headerTimeout time.Duration // 0: none

	mu   sync.Mutex
	idle map[string][]*h1Conn // by scheme://host:port, most recently used last
	n    int                  // idle connections in all lists

	// HTTPS upstreams that answered net/http's Transport over HTTP/1.1 although it
	// offered h2 (pool keys): only those are reached here, so that an upstream that
	// speaks h2 keeps being spoken to in h2.
	h1Only  sync.Map
	nh1Only atomic.Int32
}

const (
	h1MaxIdle        = 2048
	h1MaxIdlePerHost = 256
	h1IdleTimeout    = 90 * time.Second
	h1MaxHeaderBytes = 10 << 20 // net/http's Transport default
	h1Max1xx         = 5
	h1MaxH1Only      = 10000 // HTTPS upstreams remembered as HTTP/1.1 only
)

// h1Direct says whether req can go through h1Transport.
func h1Direct(req *http.Request) bool {
	return (req.URL.Scheme == "http" || req.URL.Scheme == "https") && (req.Method == http.MethodGet || req.Method == http.MethodHead) &&
		(req.Body == nil || req.Body == http.NoBody) && req.ContentLength == 0 &&
		len(req.TransferEncoding) == 0 && len(req.Trailer) == 0 &&
		req.Header.Get("Upgrade") == "" && req.URL.Host != ""
}

// RoundTrip sends req (h1Direct must hold) and returns the response, whose Body must be
// closed.
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, fmt.Errorf("net/http: invalid header field name %q", k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, fmt.Errorf("net/http: invalid header field value for %q", k)
			}
		}
	}
	ctx := req.Context()
	key, addr := h1Key(req)
	for retried := false; ; retried = true {
		var c *h1Conn
		if !retried { // the retry is on a new connection: a request is sent twice at most
			c = t.get(key)
		}
		reused := c != nil
		if c == nil {
			var err error
			if c, err = t.connect(ctx, req.URL.Scheme, key, addr, req.URL.Hostname()); err != nil {
				return nil, err
			}
		}
		resp, err := c.roundTrip(req)
		if err == nil {
			return resp, nil
		}
		c.conn.Close()
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		// A connection the upstream closed while it was idle: nothing of an answer came,
		// and a GET or HEAD may be sent again, on a new connection (one that fails too is
		// the answer).
		if reused && c.lr.read == 0 && retryable(err) {
			continue
		}
		return nil, err
	}
}

// h1Key is the pool key of req's upstream (scheme://host:port) and its address.
func h1Key(req *http.Request) (key, addr string) {
	addr = req.URL.Host
	if req.URL.Port() == "" {
		port := "80"
		if req.URL.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(req.URL.Hostname(), port)
	}
	return req.URL.Scheme + "://" + addr, addr
}

// retryable is an error of a connection found closed: the write failed or the read
// ended before the first byte.
func retryable(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// connect dials addr through the dial guard and, for HTTPS, makes the TLS connection as
// the Transport's are made (upstreamTLS, the host as the certificate's name), offering
// HTTP/1.1 alone.
func (t *h1Transport) connect(ctx context.Context, scheme, key, addr, host string) (*h1Conn, error) {
	raw, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	conn := raw
	if scheme == "https" {
		// Offered alone, http/1.1 is the only protocol the upstream can choose: crypto/tls
		// fails a handshake whose server picks one not offered.
		tc, err := t.tls.client(ctx, raw, host, "http/1.1")
		if err != nil {
			return nil, err
		}
		conn = tc
	}
	return t.newConn(key, raw, conn), nil
}

func (t *h1Transport) newConn(key string, raw, conn net.Conn) *h1Conn {
	c := &h1Conn{t: t, key: key, conn: conn, raw: raw}
	c.lr.conn = conn
	c.lr.max = -1
	c.br = bufio.NewReaderSize(&c.lr, 4096)
	c.bw = bufio.NewWriterSize(conn, 4096)
	return c
}

// get takes the most recently used idle connection to key that is still good.
func (t *h1Transport) get(key string) *h1Conn {
	for {
		t.mu.Lock()
		l := t.idle[key]
		if len(l) == 0 {
			t.mu.Unlock()
			return nil
		}
		c := l[len(l)-1]
		l[len(l)-1] = nil
		t.idle[key] = l[:len(l)-1]
		t.n--
		t.mu.Unlock()
		c.timer.Stop()
		if c.quiet() {
			return c
		}
		c.conn.Close()
	}
}

// put keeps c for the next request to its host, within the idle bounds.
func (t *h1Transport) put(c *h1Conn) {
	if _, ok := c.raw.(syscall.Conn); !ok {
		c.conn.Close() // quiet cannot look at it: not reused
		return
	}
	t.mu.Lock()
	if t.idle == nil {
		t.idle = map[string][]*h1Conn{}
	}
	if t.n >= h1MaxIdle || len(t.idle[c.key]) >= h1MaxIdlePerHost {
		t.mu.Unlock()
		c.conn.Close()
		return
	}
	t.idle[c.key] = append(t.idle[c.key], c)
	t.n++
	if c.timer == nil {
		c.timer = time.AfterFunc(h1IdleTimeout, func() { t.expire(c) })
	} else {
		c.timer.Reset(h1IdleTimeout)
	}
	t.mu.Unlock()
}

// expire closes c if it is still idle.
func (t *h1Transport) expire(c *h1Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.idle[c.key]
	for i, x := range l {
		if x == c {
			t.idle[c.key] = append(l[:i], l[i+1:]...)
			t.n--
			c.conn.Close()
			return
		}
	}
}

// CloseIdleConnections closes the idle connections; those in use close when their
// response ends.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle, t.n = nil, 0
	t.mu.Unlock()
	for _, l := range idle {
		for _, c := range l {
			c.timer.Stop()
			c.conn.Close()
		}
	}
}

// roundTrip sends an allowed request upstream: through h1Transport when it can carry it
// (an HTTPS upstream once it has answered the Transport in HTTP/1.1), else through
// net/http's Transport. An approved request always takes the Transport, the path its
// approval's binding describes (hold.go); so does every request when a parent proxy is
// airlock's way out.
func (p *Proxy) roundTrip(req *http.Request, approved bool) (*http.Response, error) {
	direct := !approved && p.opts.Parent.URL == nil && h1Direct(req)
	if direct && (req.URL.Scheme == "http" || p.h1.speaksH1(req)) {
		return p.h1.RoundTrip(req)
	}
	if requiresHTTP1(req) {
		req = req.WithContext(context.WithValue(req.Context(), onlyHTTP1{}, true))
	}
	resp, err := p.tr.RoundTrip(req)
	if direct && err == nil && resp.ProtoMajor == 1 && resp.TLS != nil {
		p.h1.learnH1(req)
	}
	return resp, err
}

// speaksH1 says whether req's HTTPS upstream answered in HTTP/1.1 when offered h2.
func (t *h1Transport) speaksH1(req *http.Request) bool {
	key, _ := h1Key(req)
	_, ok := t.h1Only.Load(key)
	return ok
}

// learnH1 remembers req's HTTPS upstream as one that speaks HTTP/1.1 only.
func (t *h1Transport) learnH1(req *http.Request) {
	key, _ := h1Key(req)
	if _, ok := t.h1Only.Load(key); ok {
		return
	}
	if t.nh1Only.Add(1) > h1MaxH1Only { // a slot is taken before the store: the cap holds under races
		t.nh1Only.Add(-1)
		return
	}
	if _, loaded := t.h1Only.LoadOrStore(key, struct{}{}); loaded {
		t.nh1Only.Add(-1)
	}
}
