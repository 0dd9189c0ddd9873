package main

import (
	"errors"
	"os"
	"sync"

	"github.com/airlock-proxy/airlock/internal/hostterm"
	"github.com/airlock-proxy/airlock/sandbox"
)

// ttyMode is what -t and -T ask for.
type ttyMode struct {
	force, refuse bool
}

// want reports whether a command gets a terminal of its sandbox: with -t; without -T,
// when airlock's stdin and stdout are both terminals (an operator typing at it).
func (m ttyMode) want(stdin, stdout *os.File) (bool, error) {
	switch {
	case m.force && m.refuse:
		return false, errors.New("-t (--tty) and -T (--no-tty) contradict each other")
	case m.force:
		return true, nil
	case m.refuse:
		return false, nil
	}
	return hostterm.IsTerminal(stdin) && hostterm.IsTerminal(stdout), nil
}

// hostTTY ties airlock's own terminal to a sandboxed command's (sandbox.TTY) for the
// command's run: the host terminal in raw mode, so that every key reaches the command's
// terminal (Ctrl-C signals the command inside, not airlock), and its size at start and on
// every SIGWINCH. end puts the terminal back as it was; it is called on every way out of
// the run (and deferred, for a panic), and only its first call acts.
type hostTTY struct {
	in, out *os.File // airlock's stdin and stdout

	once    sync.Once
	restore func() error
	stop    func()
}

// defaultSize is the size of a terminal when airlock has none to copy (-t without one).
var defaultSize = sandbox.WindowSize{Rows: 24, Cols: 80}

// start returns the command's TTY and puts the host terminal, if stdin is one, in raw
// mode. A nil hostTTY means no terminal.
func (h *hostTTY) start() (*sandbox.TTY, error) {
	if h == nil {
		return nil, nil
	}
	sizeOf := h.out
	if !hostterm.IsTerminal(sizeOf) {
		sizeOf = h.in
	}
	t := &sandbox.TTY{Size: defaultSize, Term: os.Getenv("TERM")}
	if r, c, ok := hostterm.Size(sizeOf); ok {
		t.Size = sandbox.WindowSize{Rows: r, Cols: c}
	}
	resize := make(chan sandbox.WindowSize, 1)
	t.Resize = resize
	h.stop = hostterm.WatchSize(sizeOf, func(r, c uint16) {
		// The latest size wins: an older one still queued is dropped.
		select {
		case <-resize:
		default:
		}
		resize <- sandbox.WindowSize{Rows: r, Cols: c}
	})
	if hostterm.IsTerminal(h.in) {
		restore, err := hostterm.MakeRaw(h.in)
		if err != nil {
			h.stop()
			return nil, err
		}
		h.restore = restore
	}
	return t, nil
}

// end restores the host terminal's settings and stops following its size.
func (h *hostTTY) end() {
	if h == nil {
		return
	}
	h.once.Do(func() {
		if h.stop != nil {
			h.stop()
		}
		if h.restore != nil {
			_ = h.restore()
		}
	})
}
