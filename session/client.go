package session

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/coder/websocket"

	"github.com/airlock-proxy/airlock/internal/jsonapi"
	"github.com/airlock-proxy/airlock/sandbox"
)

// Client speaks the sessions API of an airlock admin listener with an issuer token. The
// token is never printed.
type Client struct {
	BaseURL string
	Token   string
	HTTP    *http.Client // nil: http.DefaultClient (no overall timeout: exec streams last)
}

// String describes the client without its token.
func (c *Client) String() string { return fmt.Sprintf("session.Client{BaseURL: %q}", c.BaseURL) }

// LogValue logs the client without its token.
func (c *Client) LogValue() slog.Value { return slog.GroupValue(slog.String("base_url", c.BaseURL)) }

func (c *Client) hc() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	return jsonapi.Do(ctx, c.hc(), c.BaseURL, c.Token, method, path, in, out, 64<<20)
}

func sbxPath(id string, rest ...string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + strings.Join(rest, "")
}

// Create creates a sandbox.
func (c *Client) Create(ctx context.Context, spec Spec) (Info, error) {
	var info Info
	err := c.do(ctx, http.MethodPost, "/v1/sandboxes", spec, &info)
	return info, err
}

// List lists the live sandboxes.
func (c *Client) List(ctx context.Context) ([]Info, error) {
	var out []Info
	err := c.do(ctx, http.MethodGet, "/v1/sandboxes", nil, &out)
	return out, err
}

// Get describes one sandbox.
func (c *Client) Get(ctx context.Context, id string) (Info, error) {
	var info Info
	err := c.do(ctx, http.MethodGet, sbxPath(id), nil, &info)
	return info, err
}

// Delete destroys a sandbox and returns its report.
func (c *Client) Delete(ctx context.Context, id string) (sandbox.Report, error) {
	var rep sandbox.Report
	err := c.do(ctx, http.MethodDelete, sbxPath(id), nil, &rep)
	return rep, err
}

// Result returns an exec's result by id.
func (c *Client) Result(ctx context.Context, id, execID string) (ExecResult, error) {
	var r ExecResult
	err := c.do(ctx, http.MethodGet, sbxPath(id, "/execs/", url.PathEscape(execID)), nil, &r)
	return r, err
}

// Exec runs a command and streams its output to stdout and stderr. With stdin non-nil it
// uses the WebSocket form and sends stdin, then its end; otherwise the plain stream.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (ExecResult, error) {
	if stdin != nil {
		req.Stdin = true
		return c.execWS(ctx, id, req, stdin, nil, stdout, stderr)
	}
	b, _ := json.Marshal(req)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.BaseURL, "/")+sbxPath(id, "/exec"), bytes.NewReader(b))
	if err != nil {
		return ExecResult{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Authorization", "Bearer "+c.Token)
	resp, err := c.hc().Do(hreq)
	if err != nil {
		return ExecResult{}, fmt.Errorf("%s unreachable: %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ExecResult{}, statusError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var execID string
	for sc.Scan() {
		var f Frame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			return ExecResult{}, fmt.Errorf("exec stream: %w", err)
		}
		if done, res, err := handleFrame(f, &execID, stdout, stderr); done {
			return res, err
		}
	}
	return ExecResult{ExecID: execID}, lostStream(execID, sc.Err())
}

// ExecTTY runs a command on a terminal of the sandbox's own ("tty": true), over the
// WebSocket form: stdin, when not nil, is what is typed at the terminal (its end is not
// the command's: a terminal's input has none), out receives everything the terminal
// shows, and each size received on resize is sent as a resize message until the command
// ends. req.TTYSize is the size at start.
func (c *Client) ExecTTY(ctx context.Context, id string, req ExecRequest, stdin io.Reader, out io.Writer, resize <-chan sandbox.WindowSize) (ExecResult, error) {
	req.TTY, req.Stdin = true, stdin != nil
	return c.execWS(ctx, id, req, stdin, resize, out, nil)
}

func (c *Client) execWS(ctx context.Context, id string, req ExecRequest, stdin io.Reader, resize <-chan sandbox.WindowSize, stdout, stderr io.Writer) (ExecResult, error) {
	u := strings.TrimRight(c.BaseURL, "/") + sbxPath(id, "/exec")
	u = "ws" + strings.TrimPrefix(u, "http")
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.hc(),
		HTTPHeader: http.Header{"Authorization": {"Bearer " + c.Token}}})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return ExecResult{}, statusError(resp)
		}
		return ExecResult{}, fmt.Errorf("%s: exec: %w", c.BaseURL, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(32 << 20)
	b, _ := json.Marshal(req)
	if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
		return ExecResult{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if resize != nil {
		go sendResizes(ctx, conn, resize)
	}
	if stdin != nil {
		go sendStdin(ctx, conn, stdin)
	}
	var execID string
	for {
		_, msg, err := conn.Read(ctx)
		if err != nil {
			return ExecResult{ExecID: execID}, lostStream(execID, err)
		}
		var f Frame
		if err := json.Unmarshal(msg, &f); err != nil {
			return ExecResult{}, fmt.Errorf("exec stream: %w", err)
		}
		if done, res, err := handleFrame(f, &execID, stdout, stderr); done {
			return res, err
		}
	}
}

// sendResizes sends each size as a resize message until ctx ends.
func sendResizes(ctx context.Context, conn *websocket.Conn, resize <-chan sandbox.WindowSize) {
	for {
		select {
		case s, ok := <-resize:
			if !ok {
				return
			}
			m, _ := json.Marshal(ClientMessage{Resize: &Resize{Rows: int(s.Rows), Cols: int(s.Cols)}})
			if conn.Write(ctx, websocket.MessageText, m) != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// sendStdin sends stdin as stdin messages, then its end.
func sendStdin(ctx context.Context, conn *websocket.Conn, stdin io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := stdin.Read(buf)
		if n > 0 {
			m, _ := json.Marshal(ClientMessage{Stdin: buf[:n]})
			if conn.Write(ctx, websocket.MessageText, m) != nil {
				return
			}
		}
		if err != nil {
			m, _ := json.Marshal(ClientMessage{StdinEOF: true})
			_ = conn.Write(ctx, websocket.MessageText, m)
			return
		}
	}
}

func handleFrame(f Frame, execID *string, stdout, stderr io.Writer) (bool, ExecResult, error) {
	switch {
	case f.Result != nil:
		return true, *f.Result, nil
	case f.Error != "":
		return true, ExecResult{ExecID: *execID}, errors.New(f.Error)
	case f.Stream == "stdout" && stdout != nil:
		_, _ = stdout.Write(f.Data)
	case f.Stream == "stderr" && stderr != nil:
		_, _ = stderr.Write(f.Data)
	case f.ExecID != "":
		*execID = f.ExecID
	}
	return false, ExecResult{}, nil
}

func lostStream(execID string, err error) error {
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	if execID == "" {
		return fmt.Errorf("exec stream lost before the command started: %w", err)
	}
	return fmt.Errorf("exec stream lost (exec %s; ask for its result with GET .../execs/%s): %w", execID, execID, err)
}

// PutFile writes data to path in the sandbox.
func (c *Client) PutFile(ctx context.Context, id, path string, data []byte) error {
	_, err := c.raw(ctx, http.MethodPut, sbxPath(id, "/files?path=", url.QueryEscape(path)), data)
	return err
}

// GetFile reads path in the sandbox.
func (c *Client) GetFile(ctx context.Context, id, path string) ([]byte, error) {
	return c.raw(ctx, http.MethodGet, sbxPath(id, "/files?path=", url.QueryEscape(path)), nil)
}

// ListFiles lists a directory in the sandbox (ls -la).
func (c *Client) ListFiles(ctx context.Context, id, path string) ([]byte, error) {
	return c.raw(ctx, http.MethodGet, sbxPath(id, "/files/list?path=", url.QueryEscape(path)), nil)
}

// Patch returns the copy-on-write workspace's changes as a git-style patch.
func (c *Client) Patch(ctx context.Context, id string) ([]byte, error) {
	return c.raw(ctx, http.MethodGet, sbxPath(id, "/patch"), nil)
}

func (c *Client) raw(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := c.hc().Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s unreachable: %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, statusError(resp)
	}
	return io.ReadAll(io.LimitReader(resp.Body, 1<<30))
}

func statusError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e APIError
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	return &jsonapi.StatusError{Status: resp.StatusCode, Message: msg}
}
