package sandbox

import (
	"errors"
	"strings"
)

// TTY gives a command a pseudo-terminal of the sandbox's own: a terminal of the sandbox's
// private devpts instance (at most Options.Ptys of them), never one of the host's, so that
// what the command does to its terminal (TIOCSTI pushing input, TIOCLINUX, changing modes)
// reaches only that terminal. The command is the leader of a new session with the terminal
// as its controlling terminal: job control works, and the characters typed for
// interrupt, suspend and quit (Ctrl-C, Ctrl-Z, Ctrl-\) signal its foreground process
// group inside the sandbox.
//
// With a TTY, Command.Stdin is what is typed at the terminal (its end is not passed on:
// a terminal has no end of input but the EOF character), and Command.Stdout receives
// everything the terminal shows, the command's stderr included: a terminal's output is
// one stream, and Result.Stderr stays empty. The caller that ties a terminal of its own
// to it (the operator's, in raw mode, or a client's over the exec API) sends its size on
// Resize whenever it changes; the command sees SIGWINCH.
type TTY struct {
	// Term is the terminal's type, the command's $TERM unless Command.Env sets one;
	// empty, or not a plain name (letters, digits, '.', '_', '+', '-'), means DefaultTerm.
	Term string
	Size WindowSize // the size at start; zero is the kernel's default (0×0)
	// Resize carries later sizes; nil when the size never changes. The run stops
	// reading it when the command ends; the sender must not block on it (a buffered
	// channel of one, replaced by the latest size, serves).
	Resize <-chan WindowSize
}

// WindowSize is a terminal's size in characters.
type WindowSize struct {
	Rows, Cols uint16
}

// ErrNoTTY is returned by Run for a command with a TTY on a backend that gives none.
var ErrNoTTY = errors.New("this sandbox backend gives commands no terminal")

// DefaultTerm is a TTY's terminal type when none is given.
const DefaultTerm = "xterm-256color"

// termEnv is the TERM entry of a command with t.
func (t *TTY) termEnv() string {
	name := t.Term
	ok := name != "" && len(name) <= 64
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._+-", c)) {
			ok = false
		}
	}
	if !ok {
		name = DefaultTerm
	}
	return "TERM=" + name
}
