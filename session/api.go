package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/airlock-proxy/airlock/internal/jsonapi"
	"github.com/airlock-proxy/airlock/sandbox"
)

// Frame is one message of an exec stream, server to client: the exec's id first
// ({exec_id}), then output ({stream, data}; data is base64 in JSON), and last the result,
// whose fields are the frame's own ({exec_id, exit_code, signal, duration_ms, timed_out,
// ...}: the frame that has exit_code is the last). A frame with only error says the exec
// could not start.
type Frame struct {
	ExecID string `json:"exec_id,omitempty"`
	Stream string `json:"stream,omitempty"` // stdout or stderr
	Data   []byte `json:"data,omitempty"`
	Error  string `json:"error,omitempty"`
	// Result is set on the last frame; its fields are marshalled flat into the frame.
	Result *ExecResult `json:"-"`
}

// MarshalJSON writes a result frame as the result's fields.
func (f Frame) MarshalJSON() ([]byte, error) {
	if f.Result != nil {
		return json.Marshal(f.Result)
	}
	type plain Frame
	return json.Marshal(plain(f))
}

// UnmarshalJSON reads either form: a frame with exit_code is a result.
func (f *Frame) UnmarshalJSON(b []byte) error {
	var probe struct {
		ExitCode *int `json:"exit_code"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return err
	}
	if probe.ExitCode != nil {
		var r ExecResult
		if err := json.Unmarshal(b, &r); err != nil {
			return err
		}
		*f = Frame{ExecID: r.ExecID, Result: &r}
		return nil
	}
	type plain Frame
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*f = Frame(p)
	return nil
}

// NDJSON is the media type of a plain exec stream: one Frame per line.
const NDJSON = "application/x-ndjson"

// maxSpecBody bounds create and exec request bodies.
const maxSpecBody = 256 << 10

// Routes serves the sessions API on r (mount it behind issuer authentication):
//
//	POST   /v1/sandboxes                         Spec → 201 Info
//	GET    /v1/sandboxes                         → [Info]
//	GET    /v1/sandboxes/{id}                    → Info
//	DELETE /v1/sandboxes/{id}                    → the report
//	POST   /v1/sandboxes/{id}/exec               ExecRequest → NDJSON frames
//	GET    /v1/sandboxes/{id}/exec               WebSocket: ExecRequest, then ClientMessages
//	GET    /v1/sandboxes/{id}/execs/{exec_id}    → ExecResult
//	PUT    /v1/sandboxes/{id}/files?path=P       raw bytes → 204
//	GET    /v1/sandboxes/{id}/files?path=P       → raw bytes
//	GET    /v1/sandboxes/{id}/files/list?path=P  → text (ls -la)
//	GET    /v1/sandboxes/{id}/changes | patch | report
func (m *Manager) Routes(r chi.Router) {
	r.Post("/v1/sandboxes", m.handleCreate)
	r.Get("/v1/sandboxes", func(w http.ResponseWriter, _ *http.Request) { jsonapi.Write(w, http.StatusOK, m.List()) })
	r.Get("/v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		info, err := m.Info(chi.URLParam(r, "id"))
		if err != nil {
			writeErr(w, err)
			return
		}
		jsonapi.Write(w, http.StatusOK, info)
	})
	r.Delete("/v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		rep, err := m.Delete(r.Context(), chi.URLParam(r, "id"))
		if err != nil && rep.SandboxID == "" {
			writeErr(w, err)
			return
		}
		jsonapi.Write(w, http.StatusOK, rep)
	})
	r.Post("/v1/sandboxes/{id}/exec", m.handleExec)
	r.Get("/v1/sandboxes/{id}/exec", m.handleExecWS)
	r.Get("/v1/sandboxes/{id}/execs/{exec_id}", func(w http.ResponseWriter, r *http.Request) {
		res, err := m.ExecResult(chi.URLParam(r, "id"), chi.URLParam(r, "exec_id"))
		if err != nil {
			writeErr(w, err)
			return
		}
		jsonapi.Write(w, http.StatusOK, res)
	})
	r.Put("/v1/sandboxes/{id}/files", m.handlePut)
	r.Get("/v1/sandboxes/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		b, err := m.GetFile(r.Context(), chi.URLParam(r, "id"), r.URL.Query().Get("path"))
		if err != nil {
			writeErr(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(b)
	})
	r.Get("/v1/sandboxes/{id}/files/list", func(w http.ResponseWriter, r *http.Request) {
		b, err := m.ListFiles(r.Context(), chi.URLParam(r, "id"), r.URL.Query().Get("path"))
		if err != nil {
			writeErr(w, err)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write(b)
	})
	r.Get("/v1/sandboxes/{id}/changes", func(w http.ResponseWriter, r *http.Request) {
		s, err := m.Get(chi.URLParam(r, "id"))
		if err != nil {
			writeErr(w, err)
			return
		}
		ch, err := s.sb.Changes()
		if err != nil && !errors.Is(err, sandbox.ErrChangesIncomplete) {
			writeErr(w, err)
			return
		}
		if ch == nil {
			ch = []sandbox.Change{}
		}
		jsonapi.Write(w, http.StatusOK, ch)
	})
	r.Get("/v1/sandboxes/{id}/patch", func(w http.ResponseWriter, r *http.Request) {
		s, err := m.Get(chi.URLParam(r, "id"))
		if err != nil {
			writeErr(w, err)
			return
		}
		if s.sb.Report().SandboxID == "" || s.spec.Workspace == "" || !isCoW(s.spec.Workspace) {
			writeErr(w, fmt.Errorf("%w: a patch needs a copy-on-write workspace (workspace \"DIR:cow\")", ErrConflict))
			return
		}
		var buf bytes.Buffer
		err = s.sb.WritePatch(&buf)
		if err != nil && !errors.Is(err, sandbox.ErrPatchIncomplete) {
			writeErr(w, err)
			return
		}
		if err != nil {
			w.Header().Set("Airlock-Patch-Incomplete", sanitizeHeader(err.Error()))
		}
		w.Header().Set("Content-Type", "text/x-diff")
		_, _ = w.Write(buf.Bytes())
	})
	r.Get("/v1/sandboxes/{id}/report", func(w http.ResponseWriter, r *http.Request) {
		rep, err := m.Report(chi.URLParam(r, "id"))
		if err != nil {
			writeErr(w, err)
			return
		}
		jsonapi.Write(w, http.StatusOK, rep)
	})
}

func isCoW(ws string) bool {
	_, mode, err := sandbox.ParseWorkspace(ws)
	return err == nil && mode == sandbox.WorkspaceCoW
}

func (m *Manager) handleCreate(w http.ResponseWriter, r *http.Request) {
	var spec Spec
	if err := decodeJSON(w, r, &spec); err != nil {
		writeErr(w, err)
		return
	}
	info, err := m.Create(r.Context(), spec)
	if err != nil {
		writeErr(w, err)
		return
	}
	jsonapi.Write(w, http.StatusCreated, info)
}

func (m *Manager) handlePut(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(io.LimitReader(r.Body, m.opts.MaxFileBytes+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeErr(w, fmt.Errorf("%w: the file is larger than the admin API takes (admin.max_body_bytes)", ErrTooLarge))
			return
		}
		writeErr(w, fmt.Errorf("%w: reading the body: %v", ErrBadRequest, err))
		return
	}
	if err := m.PutFile(r.Context(), chi.URLParam(r, "id"), r.URL.Query().Get("path"), b); err != nil {
		writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// openStream begins an exec's stream, in either form: it answers the error when the
// session named in r's path does not exist (ok false), and otherwise lifts the admin
// listener's read and write timeouts, which do not apply to a command that may run for long.
// rc is w's controller, to flush the stream with.
func (m *Manager) openStream(w http.ResponseWriter, r *http.Request) (id string, rc *http.ResponseController, ok bool) {
	id = chi.URLParam(r, "id")
	if _, err := m.Get(id); err != nil {
		writeErr(w, err)
		return "", nil, false
	}
	rc = http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	_ = rc.SetReadDeadline(time.Time{})
	return id, rc, true
}

// handleExec serves the plain form: the request body is the ExecRequest, the answer a
// stream of NDJSON frames, flushed as output comes.
func (m *Manager) handleExec(w http.ResponseWriter, r *http.Request) {
	var req ExecRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeErr(w, err)
		return
	}
	if req.Stdin || req.TTY {
		writeErr(w, fmt.Errorf("%w: stdin and tty need the WebSocket form of exec (GET with Upgrade: websocket), where input and resize messages travel", ErrBadRequest))
		return
	}
	id, rc, ok := m.openStream(w, r)
	if !ok {
		return
	}
	var mu sync.Mutex
	started := false
	enc := json.NewEncoder(w)
	send := func(f Frame) error {
		mu.Lock()
		defer mu.Unlock()
		if !started {
			w.Header().Set("Content-Type", NDJSON)
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		if err := enc.Encode(f); err != nil {
			return err
		}
		return rc.Flush()
	}
	res, err := m.Exec(r.Context(), id, req, ExecIO{
		Output:  func(stream string, p []byte) error { return send(Frame{Stream: stream, Data: p}) },
		Started: func(execID string) { _ = send(Frame{ExecID: execID}) },
	})
	if err != nil {
		if !started {
			writeErr(w, err)
			return
		}
		_ = send(Frame{Error: err.Error()})
		return
	}
	_ = send(Frame{Result: &res})
}

func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return fmt.Errorf("%w: send the request body as application/json", ErrBadRequest)
		}
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxSpecBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: request body over %d bytes", ErrTooLarge, maxSpecBody)
		}
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%w: empty request body; send a JSON object", ErrBadRequest)
		}
		return fmt.Errorf("%w: request body: %v", ErrBadRequest, err)
	}
	return nil
}

// APIError is the JSON body of every error answer.
type APIError struct {
	Error string `json:"error"`
	Owner string `json:"owner,omitempty"` // the airlock a sandbox of another replica belongs to
}

func writeErr(w http.ResponseWriter, err error) {
	status := statusOf(err)
	body := APIError{Error: err.Error()}
	var no *NotOwnerError
	if errors.As(err, &no) {
		body.Owner = no.Owner
	}
	if status >= 500 {
		body.Error = "internal error: " + truncate(err.Error(), 300)
	}
	jsonapi.Write(w, status, body)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func sanitizeHeader(s string) string {
	b := []byte(truncate(s, 400))
	for i, c := range b {
		if c < 0x20 || c == 0x7f {
			b[i] = ' '
		}
	}
	return string(b)
}
