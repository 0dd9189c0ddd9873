package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"syscall"
	"time"
)

// connKey carries the accepted client connection in a request's context.
const connKey ctxKey = 100

// clientGone reports whether the peer of c has closed its end: a non-blocking peek at the
// socket returns end-of-file. Bytes waiting (a pipelined request) mean it is still there.
func clientGone(c net.Conn) bool {
	var raw syscall.Conn
	switch x := c.(type) {
	case *idleConn:
		return clientGone(x.Conn)
	case syscall.Conn:
		raw = x
	default:
		return false
	}
	rc, err := raw.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	var buf [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil && n == 0:
			gone = true
		case err != nil && !errors.Is(err, syscall.EAGAIN):
			gone = true
		case err == nil && peerClosed(fd):
			// Bytes wait, but the peer has closed its end after them: a TLS client sends
			// close_notify before its FIN, so the peek never sees end-of-file.
			gone = true
		}
		return true
	})
	return gone
}

// tcpCloseWait is the TCP state after the peer's FIN (include/net/tcp_states.h).
const tcpCloseWait = 8

// peerClosed reports whether the TCP connection fd has received its peer's FIN: the state
// is the first byte of struct tcp_info, which the kernel copies for any shorter length.
func peerClosed(fd uintptr) bool {
	v, err := syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_INFO)
	if err != nil {
		return false
	}
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], uint32(v))
	return b[0] == tcpCloseWait
}

// watchClient returns a context cancelled when the client of a held request inside a tunnel
// goes away. (For plain HTTP the server's own context already does this.)
func watchClient(ctx context.Context, c net.Conn) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if c == nil {
		return ctx, cancel
	}
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if clientGone(c) {
					cancel()
					return
				}
			}
		}
	}()
	return ctx, cancel
}
