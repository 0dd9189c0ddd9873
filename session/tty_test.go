package session_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/session"
)

// screen collects a terminal's output for a test to wait on.
type screen struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits, with a generous deadline, until the output shows want.
func (s *screen) waitFor(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Contains(s.String(), want) {
			return
		}
	}
	t.Fatalf("the terminal never showed %q; it shows %q", want, s.String())
}

// TestTTYExec: "tty": true gives the command a terminal of the sandbox's own at the size
// asked for; a resize message changes the size the command sees (stty size, after its
// SIGWINCH); Ctrl-C typed (the byte 0x03) interrupts its foreground process group; its
// stderr is on the one stream; the exit status is the command's.
func TestTTYExec(t *testing.T) {
	e := newEnv(t, nil)
	info := e.create(t, session.Spec{})
	script := `tty; stty size; echo "$TERM"; echo err-line >&2; echo "ptsdev=$(stat -c %d "$(tty)")"
trap 'echo "resized $(stty size)"' WINCH
trap 'echo interrupted; exit 3' INT
echo ready
while :; do sleep 0.1; done
`
	c := &session.Client{BaseURL: e.srv.URL}
	keys, typed := io.Pipe()
	defer typed.Close()
	resize := make(chan sandbox.WindowSize, 1)
	out := &screen{}
	type done struct {
		res session.ExecResult
		err error
	}
	ch := make(chan done, 1)
	go func() {
		res, err := c.ExecTTY(context.Background(), info.ID, session.ExecRequest{Argv: []string{"sh", "-c", script},
			TTYSize: &session.Resize{Rows: 30, Cols: 100}, Term: "vt100"}, keys, out, resize)
		ch <- done{res, err}
	}()
	out.waitFor(t, "ready")
	for _, want := range []string{"/dev/pts/0", "30 100", "vt100", "err-line"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("want %q on the terminal: %q", want, out.String())
		}
	}
	// The terminal is of another devpts than the host's.
	var host syscall.Stat_t
	if err := syscall.Stat("/dev/pts", &host); err != nil {
		t.Fatal(err)
	}
	if dev := fmt.Sprintf("ptsdev=%d\r", host.Dev); strings.Contains(out.String(), dev) || !strings.Contains(out.String(), "ptsdev=") {
		t.Errorf("the terminal is of the host's devpts (%s): %q", dev, out.String())
	}
	resize <- sandbox.WindowSize{Rows: 20, Cols: 70}
	out.waitFor(t, "resized 20 70")
	if _, err := typed.Write([]byte{3}); err != nil {
		t.Fatal(err)
	}
	d := <-ch
	if d.err != nil {
		t.Fatal(d.err)
	}
	if !strings.Contains(out.String(), "interrupted") || d.res.ExitCode != 3 {
		t.Errorf("Ctrl-C: want the INT trap and status 3: %+v %q", d.res, out.String())
	}
	if d.res.StderrBytes != 0 || d.res.StdoutBytes == 0 {
		t.Errorf("a terminal's output is one stream: %+v", d.res)
	}

	// Without a size the terminal is 24×80; a policy refusal is on the one stream, with
	// the terminal's line end.
	out = &screen{}
	res, err := c.ExecTTY(context.Background(), info.ID, session.ExecRequest{Argv: []string{"stty", "size"}}, nil, out, nil)
	if err != nil || res.ExitCode != 0 || strings.TrimSpace(out.String()) != "24 80" {
		t.Errorf("default size: %q %+v %v", out.String(), res, err)
	}
	out = &screen{}
	res, err = c.ExecTTY(context.Background(), info.ID, session.ExecRequest{Argv: []string{"rm", "-rf", "/tmp"}}, nil, out, nil)
	if err != nil || res.ExitCode != session.ExitRefused || !strings.Contains(out.String(), "exec.rm") || !strings.HasSuffix(out.String(), "\r\n") {
		t.Errorf("refused on a terminal: %q %+v %v", out.String(), res, err)
	}
}

// TestTTYBadRequest: a terminal asked for wrongly is refused before anything runs, saying
// which field: on the plain form (no way to send keys or sizes) with 400, on the
// WebSocket form with an error frame.
func TestTTYBadRequest(t *testing.T) {
	e := newEnv(t, nil)
	info := e.create(t, session.Spec{})
	code, b := e.do(t, "POST", "/v1/sandboxes/"+info.ID+"/exec", session.ExecRequest{Argv: []string{"sh"}, TTY: true})
	if code != http.StatusBadRequest || !strings.Contains(string(b), "WebSocket") {
		t.Errorf("tty on the plain form: %d %s", code, b)
	}
	c := &session.Client{BaseURL: e.srv.URL}
	for _, tc := range []struct {
		name string
		req  session.ExecRequest
		says string
	}{
		{"zero rows", session.ExecRequest{Argv: []string{"true"}, TTYSize: &session.Resize{Rows: 0, Cols: 80}}, "tty_size: rows 0, cols 80: want both from 1 to 65535"},
		{"too many cols", session.ExecRequest{Argv: []string{"true"}, TTYSize: &session.Resize{Rows: 24, Cols: 70000}}, "tty_size"},
		{"bad term", session.ExecRequest{Argv: []string{"true"}, Term: "xterm\x1b]52"}, "term"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.ExecTTY(context.Background(), info.ID, tc.req, nil, io.Discard, nil)
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("got %v, want an error saying %q", err, tc.says)
			}
		})
	}
	var stdout strings.Builder
	_, err := c.Exec(context.Background(), info.ID, session.ExecRequest{Argv: []string{"true"}, TTYSize: &session.Resize{Rows: 24, Cols: 80}},
		strings.NewReader(""), &stdout, nil)
	if err == nil || !strings.Contains(err.Error(), `"tty": true`) {
		t.Errorf("tty_size without tty: %v", err)
	}
}

// TestTTYBadClientMessage: a malformed message during a terminal exec (a size out of
// range, not JSON, an unknown field, input not asked for) ends the exec with a clear
// error: the command is killed, the result says why, and the WebSocket closes with 1008
// and the reason. The sandbox serves the next exec.
func TestTTYBadClientMessage(t *testing.T) {
	e := newEnv(t, nil)
	info := e.create(t, session.Spec{})
	u := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/v1/sandboxes/" + info.ID + "/exec"
	for _, tc := range []struct{ name, msg, says string }{
		{"zero rows", `{"resize":{"rows":0,"cols":80}}`, "resize: rows 0, cols 80: want both from 1 to 65535"},
		{"negative cols", `{"resize":{"rows":24,"cols":-1}}`, "resize: rows 24, cols -1"},
		{"too large", `{"resize":{"rows":65536,"cols":80}}`, "resize: rows 65536"},
		{"rows not a number", `{"resize":{"rows":"24","cols":80}}`, "client message"},
		{"unknown field", `{"resise":{"rows":24,"cols":80}}`, `unknown field "resise"`},
		{"not JSON", `rows=24`, "client message"},
		{"stdin not asked for", `{"stdin":"aGk="}`, `"stdin": true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			conn, _, err := websocket.Dial(ctx, u, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.CloseNow()
			req, _ := json.Marshal(session.ExecRequest{Argv: []string{"sh", "-c", "echo ready; sleep 60"}, TTY: true})
			if err := conn.Write(ctx, websocket.MessageText, req); err != nil {
				t.Fatal(err)
			}
			var res *session.ExecResult
			var shown strings.Builder
			sent := false
			for res == nil {
				_, b, err := conn.Read(ctx)
				if err != nil {
					t.Fatalf("stream ended before the result: %v (shown %q)", err, shown.String())
				}
				var f session.Frame
				if err := json.Unmarshal(b, &f); err != nil {
					t.Fatal(err)
				}
				shown.Write(f.Data)
				res = f.Result
				if !sent && strings.Contains(shown.String(), "ready") {
					sent = true
					if err := conn.Write(ctx, websocket.MessageText, []byte(tc.msg)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if !strings.Contains(res.Error, tc.says) || res.ExitCode == 0 {
				t.Errorf("result %+v: want the command killed and an error saying %q", res, tc.says)
			}
			_, _, err = conn.Read(ctx)
			var ce websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, tc.says[:6]) {
				t.Errorf("close: %v, want 1008 with the reason", err)
			}
			got, err := (&session.Client{BaseURL: e.srv.URL}).Result(ctx, info.ID, res.ExecID)
			if err != nil || got.State != "done" || got.Error != res.Error {
				t.Errorf("the recorded result: %+v %v", got, err)
			}
		})
	}
	// A first message with an unknown field runs nothing: 1008 naming the field.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if err := conn.Write(ctx, websocket.MessageText, []byte(`{"argv":["touch","/tmp/ran"],"tty":true,"rows":24}`)); err != nil {
		t.Fatal(err)
	}
	_, _, err = conn.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, `unknown field "rows"`) {
		t.Errorf("first message with an unknown field: %v", err)
	}
	if _, _, res, _ := e.exec(t, info.ID, session.ExecRequest{Argv: []string{"test", "-e", "/tmp/ran"}}); res.ExitCode != 1 {
		t.Errorf("the refused request ran: %+v", res)
	}
	if _, _, res, _ := e.exec(t, info.ID, session.ExecRequest{Argv: []string{"true"}}); res.ExitCode != 0 {
		t.Errorf("the sandbox after bad messages: %+v", res)
	}
}
