package proxy

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"time"
)

// connKind is what a transparent connection carries, told from its first bytes.
type connKind int

const (
	kindUnknown connKind = iota
	kindTLS
	kindHTTP
	kindOther
)

// fill reads once more into pending, waiting until deadline at most. It reports whether
// bytes arrived.
func (c *transparentConn) fill(deadline time.Time, max int) bool {
	if len(c.pending) >= max {
		return false
	}
	_ = c.Conn.SetReadDeadline(deadline)
	defer c.Conn.SetReadDeadline(time.Time{})
	buf := make([]byte, min(16<<10, max-len(c.pending)))
	n, _ := c.Conn.Read(buf)
	c.pending = append(c.pending, buf[:n]...)
	return n > 0
}

// classify reads the first bytes (waiting up to wait) and tells TLS from HTTP from the rest.
func (c *transparentConn) classify(wait time.Duration) connKind {
	if c.kind != kindUnknown {
		return c.kind
	}
	deadline := time.Now().Add(wait)
	for {
		if c.kind = kindOf(c.pending); c.kind != kindUnknown {
			return c.kind
		}
		if !c.fill(deadline, 64) {
			c.kind = kindOther
			return c.kind
		}
	}
}

// kindOf tells what a connection's first bytes b are; kindUnknown when more are needed.
func kindOf(b []byte) connKind {
	if len(b) == 0 {
		return kindUnknown
	}
	if b[0] == 0x16 { // TLS handshake record
		return kindTLS
	}
	// An HTTP/1 request line starts with a method token and a space.
	for i, ch := range b {
		switch {
		case ch == ' ' && i > 0:
			return kindHTTP
		case ch < 'A' || ch > 'Z':
			return kindOther
		case i >= 16:
			return kindOther
		}
	}
	return kindUnknown
}

// sniffHost reads a connection's first bytes for up to wait and returns the host they
// name: the TLS ClientHello's SNI or the HTTP Host header ("" when neither).
func (c *transparentConn) sniffHost(wait time.Duration, max int) string {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if !c.fill(deadline, max) {
			break
		}
		switch c.kind = kindOf(c.pending); c.kind {
		case kindTLS:
			if name, complete := clientHelloSNI(c.pending); complete {
				return name
			}
		case kindHTTP:
			if i := bytes.Index(c.pending, []byte("\r\n\r\n")); i >= 0 {
				r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(c.pending[:i+4])))
				if err != nil {
					return ""
				}
				h, _, err := splitHostPort(r.Host, 80)
				if err != nil {
					return ""
				}
				return h
			}
		case kindOther:
			return ""
		}
	}
	return ""
}

// clientHelloSNI returns the server name of the TLS ClientHello that b starts with, and
// whether b held the whole hello (false: read more).
func clientHelloSNI(b []byte) (name string, complete bool) {
	if len(b) < 5 {
		return "", false
	}
	n := int(b[3])<<8 | int(b[4])
	if len(b) < 5+n {
		return "", false
	}
	var sni string
	srv := tls.Server(&replayConn{r: bytes.NewReader(b)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			sni = h.ServerName
			return nil, errSniffed
		},
	})
	_ = srv.Handshake()
	return sni, true
}

var errSniffed = errors.New("client hello read")

// replayConn is a connection that reads from r and writes nowhere.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *replayConn) Write(b []byte) (int, error)      { return len(b), nil }
func (c *replayConn) Close() error                     { return nil }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }
func (c *replayConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *replayConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
