package session

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/airlock-proxy/airlock/sandbox"
)

// ClientMessage is a message of a WebSocket exec stream, client to server: the first is
// the ExecRequest; then stdin data (with "stdin": true), the end of stdin, and terminal
// resizes (with "tty": true they change the terminal's size, and the command sees
// SIGWINCH; without a terminal a valid resize is ignored). A message that is not one (not
// JSON, an unknown field, a resize out of range, stdin not asked for) ends the exec: its
// command is killed, the result says why, and the server closes the WebSocket with 1008
// (policy violation) and the reason.
type ClientMessage struct {
	Stdin    []byte  `json:"stdin,omitempty"`
	StdinEOF bool    `json:"stdin_eof,omitempty"`
	Resize   *Resize `json:"resize,omitempty"`
}

// Resize is a terminal's size in characters: both from 1 to 65535.
type Resize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// MaxTermSize is the largest number of rows or columns of a terminal (the kernel's).
const MaxTermSize = 65535

func (r Resize) check(what string) error {
	if r.Rows < 1 || r.Rows > MaxTermSize || r.Cols < 1 || r.Cols > MaxTermSize {
		return fmt.Errorf("%s: rows %d, cols %d: want both from 1 to %d", what, r.Rows, r.Cols, MaxTermSize)
	}
	return nil
}

func (r Resize) window() sandbox.WindowSize {
	return sandbox.WindowSize{Rows: uint16(r.Rows), Cols: uint16(r.Cols)}
}

// PlainTerm reports whether a terminal type (ExecRequest.Term) is a plain name: letters,
// digits, '.', '_', '+' and '-', at most 64 bytes.
func PlainTerm(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._+-", c)) {
			return false
		}
	}
	return true
}

// ClientError is why a WebSocket exec was ended for its client's message; it is the
// cause of the exec's cancelled context, and its text the result's error.
type ClientError struct{ msg string }

func (e *ClientError) Error() string { return e.msg }

// parseClientMessage reads one client message strictly; req is the exec's request.
func parseClientMessage(b []byte, req *ExecRequest, stdinOpen bool) (ClientMessage, error) {
	var msg ClientMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&msg); err != nil {
		return msg, &ClientError{"client message: " + truncate(err.Error(), 200)}
	}
	if msg.Resize != nil {
		if err := msg.Resize.check("resize"); err != nil {
			return msg, &ClientError{err.Error()}
		}
	}
	if (len(msg.Stdin) > 0 || msg.StdinEOF) && !req.Stdin {
		return msg, &ClientError{`stdin: the exec request did not ask to send input ("stdin": true)`}
	}
	if len(msg.Stdin) > 0 && !stdinOpen {
		return msg, &ClientError{"stdin after stdin_eof"}
	}
	return msg, nil
}

// handleExecWS serves the two-way form: the client's first message is the ExecRequest,
// then ClientMessages; the server sends the frames of the plain form.
func (m *Manager) handleExecWS(w http.ResponseWriter, r *http.Request) {
	id, _, ok := m.openStream(w, r)
	if !ok {
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered
	}
	defer c.CloseNow()
	c.SetReadLimit(maxSpecBody)
	// The connection lives on r's context; the command on ctx, which the client's going
	// away or a bad message (its cause, a ClientError) ends.
	conn := r.Context()
	ctx, cancel := context.WithCancelCause(conn)
	defer cancel(nil)
	var req ExecRequest
	typ, b, err := c.Read(conn)
	if err == nil && typ != websocket.MessageText {
		err = errors.New("the first message must be the exec request as JSON text")
	}
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err = dec.Decode(&req)
	}
	if err != nil {
		c.Close(websocket.StatusPolicyViolation, truncate("exec request: "+err.Error(), 120))
		return
	}
	var wmu sync.Mutex
	send := func(f Frame) error {
		b, _ := json.Marshal(f)
		wmu.Lock()
		defer wmu.Unlock()
		return c.Write(conn, websocket.MessageText, b)
	}
	var stdin io.Reader
	var feed *stdinFeed
	if req.Stdin {
		pr, pw := io.Pipe()
		stdin = pr
		defer pr.Close() // after the command: unblocks a write it never read
		feed = newStdinFeed()
		go feed.run(pw)
	}
	resize := make(chan sandbox.WindowSize, 1)
	go m.readClient(conn, c, &req, feed, resize, cancel)
	eio := ExecIO{
		Stdin:   stdin,
		Output:  func(stream string, p []byte) error { return send(Frame{Stream: stream, Data: p}) },
		Started: func(execID string) { _ = send(Frame{ExecID: execID}) },
	}
	if req.TTY {
		eio.Resize = resize
	}
	res, err := m.Exec(ctx, id, req, eio)
	if err != nil {
		_ = send(Frame{Error: err.Error()})
		c.Close(websocket.StatusNormalClosure, "")
		return
	}
	_ = send(Frame{Result: &res})
	var ce *ClientError
	if errors.As(context.Cause(ctx), &ce) {
		c.Close(websocket.StatusPolicyViolation, truncate(ce.Error(), 120))
		return
	}
	c.Close(websocket.StatusNormalClosure, "")
}

// readClient reads the client's messages until the connection ends, queueing stdin on
// feed (waiting on the command's input only while MaxStdinBacklog bytes are queued, and
// then at most stdinStall without progress, so the client's going away is seen) and resize (the latest size wins: an older one still queued is dropped). The end
// of the connection ends the command; so do a bad message and a stdin backlog over
// MaxStdinBacklog, with a ClientError as cause.
func (m *Manager) readClient(ctx context.Context, c *websocket.Conn, req *ExecRequest, feed *stdinFeed,
	resize chan sandbox.WindowSize, cancel context.CancelCauseFunc) {
	eof := false // the client sent stdin_eof
	defer func() {
		if feed != nil {
			feed.close(io.ErrUnexpectedEOF)
		}
	}()
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			cancel(nil)
			return
		}
		msg, err := parseClientMessage(b, req, !eof)
		if err != nil {
			cancel(err)
			return
		}
		if msg.Resize != nil {
			select {
			case <-resize:
			default:
			}
			resize <- msg.Resize.window()
		}
		if len(msg.Stdin) > 0 && feed != nil {
			if err := feed.add(ctx, msg.Stdin); err != nil {
				cancel(err)
				return
			}
		}
		if msg.StdinEOF {
			eof = true
			if feed != nil {
				feed.close(nil)
				feed = nil
			}
		}
	}
}

// MaxStdinBacklog is how many bytes of a WebSocket exec's stdin the server holds that
// its command has not read yet. Over it, the server stops reading the client until the
// command reads; when the command reads nothing for stdinStall meanwhile, the exec ends
// with a ClientError (close 1008), so that a client that went away is seen in bounded time.
const MaxStdinBacklog = 1 << 20

// stdinStall is how long a full backlog may wait for its command to read.
var stdinStall = 10 * time.Second

// stdinFeed hands a WebSocket exec's stdin to its command's input pipe from a goroutine
// of its own, so a command that does not read never stops the reading of the WebSocket
// for long.
type stdinFeed struct {
	mu      sync.Mutex
	buf     []byte // received, not yet handed to the pipe
	pending int    // bytes the command has not read: buf and a write under way
	done    bool   // no more input: close the pipe with err once buf is written
	err     error
	gone    bool // the command no longer reads (the pipe's reader is closed)
	wake    chan struct{}
	drained chan struct{} // the command read some
}

func newStdinFeed() *stdinFeed {
	return &stdinFeed{wake: make(chan struct{}, 1), drained: make(chan struct{}, 1)}
}

func (f *stdinFeed) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// add queues p. With the backlog full it waits for the command to read; nothing read for
// stdinStall is a ClientError.
func (f *stdinFeed) add(ctx context.Context, p []byte) error {
	var stall *time.Timer
	for {
		f.mu.Lock()
		if f.gone {
			f.mu.Unlock()
			return nil // dropped, as a pipe whose reader is gone drops it
		}
		if f.pending == 0 || f.pending+len(p) <= MaxStdinBacklog {
			f.buf = append(f.buf, p...)
			f.pending += len(p)
			f.signal()
			f.mu.Unlock()
			return nil
		}
		f.mu.Unlock()
		if stall == nil {
			stall = time.NewTimer(stdinStall)
			defer stall.Stop()
		}
		select {
		case <-f.drained:
			stall.Reset(stdinStall)
		case <-stall.C:
			return &ClientError{fmt.Sprintf("stdin backlog over %d bytes: the command is not reading its input", MaxStdinBacklog)}
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// close ends the input once what is queued is written: with err as the reader's error
// (nil: the end of input).
func (f *stdinFeed) close(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.done {
		f.done, f.err = true, err
		f.signal()
	}
}

// run writes what is queued to pw until the input ends or the command stops reading.
func (f *stdinFeed) run(pw *io.PipeWriter) {
	for {
		f.mu.Lock()
		b, done, err := f.buf, f.done, f.err
		f.buf = nil
		f.mu.Unlock()
		if len(b) > 0 {
			// In pieces, so that what the command reads counts as it reads it.
			piece := b[:min(len(b), 32<<10)]
			_, werr := pw.Write(piece)
			f.mu.Lock()
			f.pending -= len(piece)
			if werr == nil && len(piece) < len(b) {
				f.buf = append(b[len(piece):], f.buf...) // the rest first, then what came meanwhile
			}
			if werr != nil {
				f.gone, f.buf, f.pending = true, nil, 0
			}
			f.mu.Unlock()
			select {
			case f.drained <- struct{}{}:
			default:
			}
			if werr != nil {
				return
			}
			continue
		}
		if done {
			pw.CloseWithError(err)
			return
		}
		<-f.wake
	}
}
