package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/sandbox"
)

// Decider evaluates the policy's exec phase; *rego.Engine implements it.
type Decider interface {
	Decide(ctx context.Context, in *rego.Input) (rego.Decision, error)
}

// Approver holds a command for a human, in the same flow as held requests;
// *approval.Service implements it.
type Approver interface {
	Hold(ctx context.Context, r approval.Request) (approval.Result, error)
}

// Auditor records audit events; *audit.Sink implements it.
type Auditor interface {
	Record(ctx context.Context, ev *audit.Event) error
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec (or the first message of its
// WebSocket form).
type ExecRequest struct {
	Argv    []string          `json:"argv"`
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	Timeout string            `json:"timeout,omitempty"`
	// Stdin says the client sends standard input (WebSocket only); without it the
	// command reads an empty input.
	Stdin bool `json:"stdin,omitempty"`
	// TTY runs the command on a terminal of the sandbox's own (sandbox.TTY: a terminal of
	// its private devpts, never the host's; WebSocket only, where resize messages change
	// its size). Its output is one stream (stdout); stdin, when sent, is what is typed.
	TTY bool `json:"tty,omitempty"`
	// TTYSize is the terminal's size at start (default 24 rows, 80 columns); tty only.
	TTYSize *Resize `json:"tty_size,omitempty"`
	// Term is the terminal's type, the command's $TERM unless env sets one (default
	// xterm-256color; a name that is not plain is replaced by the default); tty only.
	Term string `json:"term,omitempty"`
}

// ExecResult is the last frame of an exec, and what GET .../execs/{exec_id} returns.
type ExecResult struct {
	ExecID      string         `json:"exec_id"`
	Argv        []string       `json:"argv"`
	State       string         `json:"state"` // running, done
	ExitCode    int            `json:"exit_code"`
	Signal      string         `json:"signal,omitempty"`
	DurationMS  float64        `json:"duration_ms"`
	TimedOut    bool           `json:"timed_out"`
	StdoutBytes int64          `json:"stdout_bytes"`
	StderrBytes int64          `json:"stderr_bytes"`
	Decision    event.Decision `json:"decision,omitempty"` // the exec phase's action, or approved
	Rule        string         `json:"rule,omitempty"`
	ApprovalID  string         `json:"approval_id,omitempty"`
	Error       string         `json:"error,omitempty"` // why the command did not run or was cut short
	Started     time.Time      `json:"started"`
}

// ExitRefused is the status of a command the policy or an approver refused (as a shell
// answers a command it cannot execute).
const ExitRefused = 126

// Output receives a command's output as it comes; stream is "stdout" or "stderr". An
// error (the client went away) ends the command.
type Output func(stream string, p []byte) error

// ExecIO is one exec's connection to its client.
type ExecIO struct {
	Stdin  io.Reader // nil: empty input
	Output Output
	// Started is called once the exec has its id, before the policy is asked.
	Started func(execID string)
	// Resize carries a terminal's later sizes (ExecRequest.TTY); see sandbox.TTY.Resize.
	Resize <-chan sandbox.WindowSize
}

// Exec runs one command in session id under the exec phase of the policy and returns its
// result; a command refused by the policy gets exit status ExitRefused and the reason on
// its stderr. ctx ending (the client went away) kills the command. The returned error is
// about the request (no such sandbox, bad argv), never the command's status.
func (m *Manager) Exec(ctx context.Context, id string, req ExecRequest, eio ExecIO) (ExecResult, error) {
	s, err := m.Get(id)
	if err != nil {
		return ExecResult{}, err
	}
	timeout, err := checkExec(&req, s.execTimeout)
	if err == nil {
		err = m.checkExecTimeout(timeout)
	}
	if err != nil {
		return ExecResult{}, err
	}
	execID := newExecID()
	res := &ExecResult{ExecID: execID, Argv: req.Argv, State: "running", Started: m.opts.Now()}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	if s.state != StateRunning {
		s.mu.Unlock()
		return ExecResult{}, fmt.Errorf("%w: sandbox %s is %s", ErrGone, id, s.state)
	}
	s.nexec++
	s.running++
	s.lastActive = m.opts.Now()
	s.cancels[execID] = cancel
	s.remember(res)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running--
		s.lastActive = m.opts.Now()
		delete(s.cancels, execID)
		s.mu.Unlock()
	}()
	if eio.Started != nil {
		eio.Started(execID)
	}

	ctx, span := m.opts.Tracer.Start(ctx, "airlock.sandbox.exec", trace.WithAttributes(
		attribute.String("airlock.sandbox.id", id), attribute.String("airlock.exec.id", execID),
		attribute.StringSlice("process.command_args", req.Argv)))
	out := &execOutput{out: eio.Output, cancel: cancel}
	var tty *sandbox.TTY
	if req.TTY {
		size := Resize{Rows: 24, Cols: 80}
		if req.TTYSize != nil {
			size = *req.TTYSize
		}
		tty = &sandbox.TTY{Term: req.Term, Size: size.window(), Resize: eio.Resize}
	}
	final := s.run(ctx, req, timeout, execStdio{eio.Stdin, tty}, out, res)
	final.StdoutBytes, final.StderrBytes = out.counts()
	span.SetAttributes(attribute.Int("process.exit.code", final.ExitCode), attribute.String("airlock.decision", string(final.Decision)),
		attribute.Int64("airlock.exec.output_bytes", final.StdoutBytes+final.StderrBytes), attribute.Bool("airlock.exec.timed_out", final.TimedOut))
	if final.Rule != "" {
		span.SetAttributes(attribute.String("airlock.rule", final.Rule))
	}
	if final.Error != "" {
		span.SetStatus(codes.Error, "exec")
	}
	span.End()
	s.mu.Lock()
	*res = final
	s.mu.Unlock()
	s.persist(final)
	m.audit(ctx, s, final, req)
	return final, nil
}

// execStdio is a command's input and, with a terminal, its terminal.
type execStdio struct {
	stdin io.Reader
	tty   *sandbox.TTY
}

// run decides, holds if need be, and runs the command; it fills in res's outcome.
func (s *Session) run(ctx context.Context, req ExecRequest, timeout time.Duration, sio execStdio, out *execOutput, res *ExecResult) (r ExecResult) {
	m := s.m
	r = *res
	r.State = "done"
	start := time.Now()
	defer func() { r.DurationMS = float64(time.Since(start)) / float64(time.Millisecond) }()
	cwd := req.Cwd
	if cwd == "" {
		cwd = s.sb.DefaultDir()
	}
	dec := rego.Decision{Action: rego.ActionAllow, Rule: "exec.no_policy"}
	if m.opts.Decider != nil {
		in := &rego.Input{Version: rego.InputVersion, Phase: rego.PhaseExec,
			Sandbox: rego.SandboxInput{ID: s.id, Labels: s.spec.Labels},
			Exec:    &rego.ExecInput{Argv: req.Argv, Cwd: cwd, Env: sortedKeys(req.Env)}}
		if in.Sandbox.Labels == nil {
			in.Sandbox.Labels = map[string]string{}
		}
		if in.Exec.Env == nil {
			in.Exec.Env = []string{}
		}
		var err error
		dec, err = m.opts.Decider.Decide(ctx, in)
		if err != nil {
			dec = rego.Decision{Action: rego.ActionDeny, Rule: "policy.error",
				Reason: "airlock could not evaluate its policy for this command; retry later"}
		}
	}
	r.Decision, r.Rule = event.Decision(dec.Action), dec.Rule
	refuse := func(msg string) ExecResult {
		if sio.tty != nil {
			// A terminal's output is one stream, and a client's terminal is in raw mode.
			out.write("stdout", []byte("airlock: "+msg+"\r\n"))
		} else {
			out.write("stderr", []byte("airlock: "+msg+"\n"))
		}
		r.ExitCode = ExitRefused
		r.Error = msg
		return r
	}
	switch {
	case dec.NeedsApproval():
		if m.opts.Approve == nil {
			return refuse(fmt.Sprintf("command held for approval by rule %s, but no approvals are configured here: %s", dec.Rule, dec.Reason))
		}
		body, _ := json.Marshal(map[string]any{"argv": req.Argv, "cwd": cwd, "env": req.Env})
		hr, err := m.opts.Approve.Hold(ctx, approval.Request{
			SandboxID: s.id, Labels: s.spec.Labels, Method: approval.MethodExec,
			URL:  "exec://" + s.id + cwd + " " + shellQuote(req.Argv),
			Body: body, Rule: dec.Rule, Reason: dec.Reason, Timeout: time.Duration(dec.Approval.Timeout),
		})
		r.ApprovalID = hr.ID
		if err != nil {
			return refuse("the approval store is unavailable; the command did not run")
		}
		if !hr.Approved() {
			return refuse(fmt.Sprintf("command %s (rule %s): %s", hr.State, dec.Rule, dec.Reason))
		}
		r.Decision = event.DecisionApproved
	case !dec.Allows():
		return refuse(fmt.Sprintf("command refused by policy rule %s: %s", dec.Rule, dec.Reason))
	}

	env := make([]string, 0, len(req.Env)+4)
	for _, k := range sortedKeys(req.Env) {
		env = append(env, k+"="+req.Env[k])
	}
	if url := m.creds.issue(s.id, r.ExecID); url != "" && s.backend == "native" {
		// The command's requests name it (see Credentials); set last, so that they win.
		env = append(env, "HTTP_PROXY="+url, "HTTPS_PROXY="+url, "http_proxy="+url, "https_proxy="+url)
	}
	res2, err := s.sb.Run(ctx, sandbox.Command{Args: req.Argv, Env: env, Dir: req.Cwd, Stdin: sio.stdin, TTY: sio.tty,
		Stdout: out.stream("stdout"), Stderr: out.stream("stderr"), OutputLimit: 1, Timeout: timeout})
	r.ExitCode, r.Signal, r.TimedOut = res2.ExitCode, res2.Signal, res2.TimedOut
	if err != nil {
		var ce *ClientError
		switch {
		case errors.As(context.Cause(ctx), &ce):
			r.Error = "the command was killed: " + ce.Error()
		case errors.Is(err, sandbox.ErrClosed), s.ending():
			// The end cancels the commands before it closes the sandbox: either may
			// be what stopped this one.
			r.Error = "the sandbox was deleted during the command"
		case out.gone():
			r.Error = "the client went away; the command was killed"
		case ctx.Err() != nil:
			r.Error = "the command was cancelled"
		default:
			r.Error = err.Error()
		}
		if r.ExitCode == 0 {
			r.ExitCode = 137
		}
	}
	return r
}

// remember keeps res for GET .../execs/{id}; s.mu is held.
func (s *Session) remember(res *ExecResult) {
	s.execs[res.ExecID] = res
	s.execOrder = append(s.execOrder, res.ExecID)
	if len(s.execOrder) > maxExecRecords {
		delete(s.execs, s.execOrder[0])
		s.execOrder = s.execOrder[1:]
	}
}

// ExecResult returns the result of exec execID of session id (State "running" while it
// runs).
func (m *Manager) ExecResult(id, execID string) (ExecResult, error) {
	s, err := m.Get(id)
	if err != nil {
		t := m.tombstone(id)
		if t == nil {
			return ExecResult{}, err
		}
		if r, ok := t.execs[execID]; ok {
			return *r, nil
		}
		return ExecResult{}, fmt.Errorf("%w: sandbox %s had no exec %q", ErrNotFound, id, execID)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.execs[execID]
	if !ok {
		return ExecResult{}, fmt.Errorf("%w: sandbox %s has no exec %q", ErrNotFound, id, execID)
	}
	return *r, nil
}

func (m *Manager) audit(ctx context.Context, s *Session, r ExecResult, req ExecRequest) {
	if m.opts.Auditor == nil {
		return
	}
	ev := audit.Event{Time: time.Now().UTC(), ID: audit.NewID(), Kind: event.KindSandboxExec, SandboxID: s.id, ExecID: r.ExecID,
		Labels: s.spec.Labels, Phase: string(rego.PhaseExec), Decision: r.Decision, Rule: r.Rule,
		Command: req.Argv, Path: req.Cwd, ApprovalID: r.ApprovalID, Status: r.ExitCode,
		BytesIn: r.StdoutBytes + r.StderrBytes, DurationMS: r.DurationMS}
	if ev.Decision == "" {
		ev.Decision = event.DecisionError
	}
	switch {
	case r.TimedOut:
		ev.ErrorClass = "timeout"
	case r.Error != "" && r.ExitCode == ExitRefused:
		ev.ErrorClass = "refused"
	case r.Error != "":
		ev.ErrorClass = "exec"
	}
	if err := m.opts.Auditor.Record(ctx, &ev); err != nil {
		m.log.Error("audit record failed", "sandbox", s.id, "exec", r.ExecID, "err", err)
	}
}

// checkExec validates req and resolves its timeout.
func checkExec(req *ExecRequest, def time.Duration) (time.Duration, error) {
	bad := func(format string, a ...any) (time.Duration, error) {
		return 0, fmt.Errorf("%w: %s", ErrBadRequest, fmt.Sprintf(format, a...))
	}
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return bad(`argv is empty: want ["program", "arg", ...]`)
	}
	for _, a := range req.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return bad("argv holds a NUL byte")
		}
	}
	if !req.TTY && (req.TTYSize != nil || req.Term != "") {
		return bad("tty_size and term are for a terminal: add \"tty\": true")
	}
	if req.Term != "" && !PlainTerm(req.Term) {
		return bad("term %q: want a terminal type such as xterm-256color (letters, digits, '.', '_', '+', '-')", req.Term)
	}
	if req.TTYSize != nil {
		if err := req.TTYSize.check("tty_size"); err != nil {
			return 0, fmt.Errorf("%w: %v", ErrBadRequest, err)
		}
	}
	if req.Cwd != "" && (!path.IsAbs(req.Cwd) || path.Clean(req.Cwd) != req.Cwd) {
		return bad("cwd %q: want a clean absolute path such as /workspace/src", req.Cwd)
	}
	for k, v := range req.Env {
		if !validEnvName(k) || strings.IndexByte(v, 0) >= 0 {
			return bad("env %q: want a variable name and a value without NUL", k)
		}
	}
	if req.Timeout == "" {
		return def, nil
	}
	d, err := time.ParseDuration(req.Timeout)
	if err != nil || d <= 0 {
		return bad("timeout %q: want a positive duration such as 30s", req.Timeout)
	}
	return d, nil
}

func newExecID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "exec-" + hex.EncodeToString(b[:])
}

// shellQuote renders argv for a human (the approver).
func shellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:@,+") == "" {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// execOutput passes a command's output to its client, counting bytes. Once the client
// fails, the command is cancelled and the rest of its output is drained.
type execOutput struct {
	out    Output
	cancel context.CancelFunc

	mu             sync.Mutex
	stdout, stderr int64
	failed         bool
}

func (o *execOutput) stream(name string) io.Writer {
	return writerFunc(func(p []byte) (int, error) {
		o.write(name, p)
		return len(p), nil
	})
}

func (o *execOutput) write(name string, p []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if name == "stdout" {
		o.stdout += int64(len(p))
	} else {
		o.stderr += int64(len(p))
	}
	if o.failed || o.out == nil {
		return
	}
	if err := o.out(name, p); err != nil {
		o.failed = true
		o.cancel()
	}
}

func (o *execOutput) counts() (int64, int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stdout, o.stderr
}

func (o *execOutput) gone() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.failed
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
