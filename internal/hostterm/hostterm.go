// Package hostterm handles the operator's own terminal while a sandboxed command runs on
// a terminal of its sandbox: raw mode for the duration (every key, Ctrl-C included,
// goes to the command's terminal, whose line discipline acts on it inside), put back as
// it was on the way out, and the size, at start and on every SIGWINCH.
package hostterm

import (
	"os"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool { return f != nil && term.IsTerminal(int(f.Fd())) }

// Size is f's terminal size in rows and columns; ok is false when f is not a terminal or
// says nothing (0×0).
func Size(f *os.File) (rows, cols uint16, ok bool) {
	if f == nil {
		return 0, 0, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Row == 0 || ws.Col == 0 {
		return 0, 0, false
	}
	return ws.Row, ws.Col, true
}

// MakeRaw puts f's terminal in raw mode: no echo, no line editing, no signals from keys,
// no output processing. restore puts back the settings f's terminal had; it may be called
// more than once (only the first acts).
func MakeRaw(f *os.File) (restore func() error, err error) {
	fd := int(f.Fd())
	old, err := term.MakeRaw(fd)
	if err != nil {
		return nil, err
	}
	var once sync.Once
	var rerr error
	return func() error {
		once.Do(func() { rerr = term.Restore(fd, old) })
		return rerr
	}, nil
}

// WatchSize calls fn with f's terminal size on every SIGWINCH airlock receives, from one
// goroutine, until stop returns.
func WatchSize(f *os.File, fn func(rows, cols uint16)) (stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGWINCH)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-sig:
				if r, c, ok := Size(f); ok {
					fn(r, c)
				}
			case <-done:
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			signal.Stop(sig)
			close(done)
			<-exited
		})
	}
}
