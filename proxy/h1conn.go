package proxy

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// One connection of h1Transport: an exchange on it, the response body that gives it back,
// and the check that an idle one is still quiet.

// h1Conn is one upstream connection of h1Transport.
type h1Conn struct {
	t     *h1Transport
	key   string
	conn  net.Conn // raw, or TLS over raw
	raw   net.Conn // the TCP connection
	lr    h1Limit  // under br: bounds the response headers, counts bytes read
	br    *bufio.Reader
	bw    *bufio.Writer
	timer *time.Timer // closes the connection once idle for h1IdleTimeout
}

// h1Limit reads the connection, failing once more than max bytes are read (max < 0: no
// bound), and counts what it read.
type h1Limit struct {
	conn net.Conn
	max  int64
	read int64
}

var errH1HeadersTooLarge = errors.New("the upstream's response headers are larger than 10 MiB")

func (l *h1Limit) Read(p []byte) (int, error) {
	if l.max >= 0 {
		if l.read >= l.max {
			return 0, errH1HeadersTooLarge
		}
		if rest := l.max - l.read; int64(len(p)) > rest {
			p = p[:rest]
		}
	}
	n, err := l.conn.Read(p)
	l.read += int64(n)
	return n, err
}

// aLongTimeAgo is a deadline that has passed: it wakes a blocked read or write at once.
var aLongTimeAgo = time.Unix(1, 0)

var gzipOffer = []string{"gzip"}

// roundTrip writes req on c and reads the response head. On an error the caller closes
// the connection.
func (c *h1Conn) roundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	c.lr.read = 0
	// A request ended early (the client gone, a deadline) ends its exchange: the
	// connection's deadline passes, and it is not reused.
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(aLongTimeAgo) })
	fail := func(err error) (*http.Response, error) {
		stop()
		return nil, err
	}
	gz := req.Method != http.MethodHead && req.Header.Get("Accept-Encoding") == "" && req.Header.Get("Range") == ""
	if gz {
		req.Header["Accept-Encoding"] = gzipOffer
	}
	err := req.Write(c.bw)
	if gz {
		delete(req.Header, "Accept-Encoding")
	}
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		return fail(err)
	}
	if c.t.headerTimeout > 0 {
		_ = c.conn.SetReadDeadline(time.Now().Add(c.t.headerTimeout))
	}
	c.lr.max = c.lr.read + h1MaxHeaderBytes
	var resp *http.Response
	for n := 0; ; n++ {
		resp, err = http.ReadResponse(c.br, req)
		if err != nil {
			return fail(err)
		}
		// A 101 ends the exchange as it does for the Transport: the caller sees it (and
		// refuses it, since nothing taken here asked to upgrade); what follows it on the
		// connection is never read, and the connection is closed below.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		if n == h1Max1xx {
			return fail(fmt.Errorf("net/http: %d informational answers in a row", n+1))
		}
		// 100 Continue, 103 Early Hints: informational, and not forwarded (as the
		// Transport does without a trace hook).
	}
	c.lr.max = -1
	if c.t.headerTimeout > 0 {
		_ = c.conn.SetReadDeadline(time.Time{})
		if ctx.Err() != nil { // the cancel above may have run before this cleared it
			_ = c.conn.SetDeadline(aLongTimeAgo)
		}
	}
	keep := !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols
	if resp.Body == http.NoBody {
		if stop() && keep {
			c.t.put(c)
		} else {
			c.conn.Close()
		}
		return resp, nil
	}
	body := &h1Body{rc: resp.Body, c: c, ctx: ctx, stop: stop, keep: keep}
	resp.Body = body
	if gz && strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		resp.Body = &h1Gzip{body: body}
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
		resp.Uncompressed = true
	}
	return resp, nil
}

// h1Body is a response body on an h1Conn: read to its end, it gives the connection back
// for the next request; closed before, it closes the connection.
type h1Body struct {
	mu     sync.Mutex
	rc     io.ReadCloser
	c      *h1Conn
	ctx    context.Context
	stop   func() bool
	keep   bool
	done   bool // the connection is released (pooled or closed)
	closed bool
}

var errH1ReadAfterClose = errors.New("http: read on closed response body")

func (b *h1Body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, errH1ReadAfterClose
	}
	if b.done {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.release(true)
	case err != nil:
		b.release(false)
		if cerr := b.ctx.Err(); cerr != nil {
			err = cerr
		}
	}
	return n, err
}

func (b *h1Body) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	b.release(false)
	return nil
}

// release ends the body's hold on its connection: back to the pool after the whole body
// was read (atEOF) on a connection both sides keep, closed otherwise.
func (b *h1Body) release(atEOF bool) {
	if b.done {
		return
	}
	b.done = true
	if b.stop() && atEOF && b.keep {
		b.c.t.put(b.c)
		return
	}
	b.c.conn.Close()
}

// h1Gzip undoes the gzip the transport asked for, as net/http's Transport does: the
// reader starts at the first Read, and its end is the body's.
type h1Gzip struct {
	body *h1Body
	zr   *gzip.Reader
	err  error
}

func (g *h1Gzip) Read(p []byte) (int, error) {
	if g.zr == nil {
		if g.err != nil {
			return 0, g.err
		}
		g.zr, g.err = gzip.NewReader(g.body)
		if g.err != nil {
			return 0, g.err
		}
	}
	return g.zr.Read(p)
}

func (g *h1Gzip) Close() error { return g.body.Close() }

// quiet says whether an idle connection is open with nothing to read: the upstream has
// neither closed it nor sent bytes nobody asked for.
func (c *h1Conn) quiet() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	if c.conn != c.raw {
		// TLS may hold records it read with the last answer's: a read that cannot wait
		// returns them, or times out at once when there are none.
		_ = c.conn.SetReadDeadline(aLongTimeAgo)
		_, err := c.br.Peek(1)
		_ = c.conn.SetReadDeadline(time.Time{})
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			return false
		}
	}
	sc, ok := c.raw.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	quiet := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		quiet = n < 0 && (err == unix.EAGAIN || err == unix.EWOULDBLOCK)
		return true
	})
	return err == nil && quiet
}
