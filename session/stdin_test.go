package session_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/airlock-proxy/airlock/session"
)

// wsExec opens a WebSocket exec of req and reads frames until its exec id.
func wsExec(t *testing.T, ctx context.Context, e *env, id string, req session.ExecRequest) (*websocket.Conn, string) {
	t.Helper()
	u := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/v1/sandboxes/" + id + "/exec"
	c, _, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	j, _ := json.Marshal(req)
	if err := c.Write(ctx, websocket.MessageText, j); err != nil {
		t.Fatal(err)
	}
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("stream ended before the exec id: %v", err)
		}
		var f session.Frame
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		if f.ExecID != "" {
			return c, f.ExecID
		}
	}
}

// sendStdin sends n bytes of stdin in chunks until done or a write fails.
func sendStdin(ctx context.Context, c *websocket.Conn, n, chunk int) error {
	m, _ := json.Marshal(session.ClientMessage{Stdin: []byte(strings.Repeat("A", chunk))})
	for sent := 0; sent < n; sent += chunk {
		if err := c.Write(ctx, websocket.MessageText, m); err != nil {
			return err
		}
	}
	return nil
}

// TestExecClientVanishesWithStdinBackedUp: a WebSocket client sends stdin its command does
// not read (more than the pipes between hold, less than the backlog) and goes away: the
// command is killed, as in the plain form, though its input is backed up.
func TestExecClientVanishesWithStdinBackedUp(t *testing.T) {
	e := newEnv(t, nil)
	for _, tty := range []bool{false, true} {
		t.Run(fmt.Sprintf("tty=%v", tty), func(t *testing.T) {
			info := e.create(t, session.Spec{})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c, execID := wsExec(t, ctx, e, info.ID,
				session.ExecRequest{Argv: []string{"sh", "-c", "exec sleep 60"}, Stdin: true, TTY: tty})
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second) // a stuck server stops reading
			err := sendStdin(wctx, c, 768<<10, 32<<10)
			wcancel()
			t.Logf("sent stdin: %v", err)
			c.CloseNow()
			var res session.ExecResult
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if res, err = e.m.ExecResult(info.ID, execID); err == nil && res.State == "done" {
					break
				}
			}
			if res.State != "done" || res.ExitCode == 0 {
				t.Fatalf("result after the client went away: %+v, %v", res, err)
			}
			if i, _ := e.m.Info(info.ID); i.Running != 0 {
				t.Errorf("still running: %+v", i)
			}
		})
	}
}

// TestExecStdinBacklog: a command that does not read its input, sent more than
// MaxStdinBacklog, is killed once the backlog waited the stall bound; the result says why
// and the WebSocket closes with 1008 and the reason. A command that reads gets all of a
// larger input, in order, however fast it is sent (the client waits meanwhile).
func TestExecStdinBacklog(t *testing.T) {
	defer session.SetStdinStall(time.Second)()
	e := newEnv(t, nil)
	info := e.create(t, session.Spec{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, _ := wsExec(t, ctx, e, info.ID, session.ExecRequest{Argv: []string{"sleep", "60"}, Stdin: true})
	go func() { _ = sendStdin(ctx, c, 4*session.MaxStdinBacklog, 64<<10) }()
	var res *session.ExecResult
	for res == nil {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("stream ended before the result: %v", err)
		}
		var f session.Frame
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		res = f.Result
	}
	says := fmt.Sprintf("stdin backlog over %d bytes: the command is not reading its input", session.MaxStdinBacklog)
	if !strings.Contains(res.Error, says) || res.ExitCode == 0 {
		t.Errorf("result %+v: want the command killed and an error saying %q", res, says)
	}
	_, _, err := c.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "stdin backlog over") {
		t.Errorf("close: %v, want 1008 with the reason", err)
	}

	// The client (airlock sandbox exec -i) gets the result: the command's status and why.
	got, err := (&session.Client{BaseURL: e.srv.URL}).Exec(ctx, info.ID, session.ExecRequest{Argv: []string{"sleep", "60"}},
		strings.NewReader(strings.Repeat("B", 4*session.MaxStdinBacklog)), nil, nil)
	if err != nil || got.ExitCode == 0 || !strings.Contains(got.Error, says) {
		t.Errorf("client: %+v %v", got, err)
	}

	// A reading command: 3 backlogs' worth arrive whole.
	n := 3 * session.MaxStdinBacklog
	c, _ = wsExec(t, ctx, e, info.ID, session.ExecRequest{Argv: []string{"sha256sum"}, Stdin: true})
	if err := sendStdin(ctx, c, n, 64<<10); err != nil {
		t.Fatal(err)
	}
	eof, _ := json.Marshal(session.ClientMessage{StdinEOF: true})
	if err := c.Write(ctx, websocket.MessageText, eof); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for res = nil; res == nil; {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("stream ended before the result: %v", err)
		}
		var f session.Frame
		_ = json.Unmarshal(b, &f)
		out.Write(f.Data)
		res = f.Result
	}
	sum := sha256.Sum256([]byte(strings.Repeat("A", n)))
	if res.ExitCode != 0 || !strings.HasPrefix(out.String(), hex.EncodeToString(sum[:])) {
		t.Errorf("reading command: %q %+v", out.String(), res)
	}
}
