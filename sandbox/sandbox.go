// Package sandbox is the backend-neutral API of disposable, bounded sandboxes whose only
// way out is airlock's proxy: Options, the Backend and Instance a backend implements, and
// Sandbox, which runs commands, keeps the run report and emits lifecycle events whatever
// the backend. The backends are sibling packages (sandbox/native, sandbox/docker,
// sandbox/kubernetes); the caller names one in Options.Backend. What several backends share
// (listeners inside a network namespace, transparent egress, host uid ranges, workspace
// protections) lives here too.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// Backend creates sandboxes of one kind: native.Native, docker.Backend, kubernetes.Backend.
type Backend interface {
	// Create builds and starts a sandbox for validated options; o.Proxy, when set, must be
	// given the sandbox's listener with Identity{o.ID, o.Labels}.
	Create(ctx context.Context, o Options) (Instance, error)
}

// Instance is one sandbox of a backend.
type Instance interface {
	// Run runs cmd (environment fully built, timeout resolved) and waits for it.
	Run(ctx context.Context, cmd Command) (Result, error)
	// Changes and Patch describe a copy-on-write workspace.
	Changes() ([]Change, error)
	Patch() ([]byte, error)
	// Close destroys the sandbox; it is idempotent.
	Close(ctx context.Context) error
}

// ErrClosed is returned by Run on a closed sandbox, and wrapped by a Run that Close ended.
var ErrClosed = errors.New("sandbox is closed")

// ErrExists is wrapped by a backend's Create when a sandbox of that id (of this airlock or
// another) already exists: the Create fails and leaves the other sandbox alone. Its text
// reads after the id: fmt.Errorf("sandbox %s %w", id, ErrExists).
var ErrExists = errors.New("already exists")

// Sandbox is a running sandbox. Its commands share the workspace, identity, network
// namespace, /tmp and $HOME until Close.
type Sandbox struct {
	opts Options
	inst Instance
	env  []string

	mu        sync.Mutex
	report    Report
	closed    bool
	closeOnce sync.Once
	closeErr  error // set once by the first Close
}

// New creates and starts a sandbox.
func New(ctx context.Context, o Options) (*Sandbox, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if o.Backend == nil {
		return nil, errors.New("create sandbox: no backend (sandbox/native, sandbox/docker or sandbox/kubernetes)")
	}
	start := time.Now()
	inst, err := o.Backend.Create(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("create sandbox %s: %w", o.ID, err)
	}
	s := &Sandbox{opts: o, inst: inst, env: baseEnv(o)}
	s.report = Report{SandboxID: o.ID, Labels: o.Labels, PolicyRevision: o.PolicyRevision, Start: start}
	if u, ok := inst.(Unenforcer); ok {
		s.report.Unenforced = slices.Clone(u.Unenforced())
	}
	o.Logger.Debug("sandbox started", "sandbox", o.ID, "elapsed", time.Since(start))
	s.event(ctx, Event{Kind: EventStart, Workspace: o.Workspace, WorkspaceMode: o.WorkspaceMode,
		Memory: o.Memory, Pids: o.Pids, CPUs: o.CPUs, Timeout: o.Timeout})
	return s, nil
}

// Unenforcer is an Instance that cannot enforce every bound of its options (a rootless
// native sandbox has no cgroups): Unenforced says what does not hold, one phrase each, for
// the run report and a notice.
type Unenforcer interface {
	Unenforced() []string
}

// Unenforced is what this sandbox does not enforce of its bounds (see Unenforcer).
func (s *Sandbox) Unenforced() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.report.Unenforced)
}

// Adopter is a Backend whose sandboxes outlive the process that created them (Docker's
// containers), so that a restarted airlock can take one over again.
type Adopter interface {
	// Adopt takes over the running sandbox o.ID that an earlier, no longer running
	// process created with the same options, and gives the proxy (o.Proxy) its listener
	// again. When it cannot, it removes what is left of that sandbox and says why.
	Adopt(ctx context.Context, o Options) (Instance, error)
}

// Adopt takes over a sandbox an earlier airlock process created (see Adopter), as New
// creates one; its report counts from now.
func Adopt(ctx context.Context, o Options) (*Sandbox, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	a, ok := o.Backend.(Adopter)
	if !ok {
		return nil, fmt.Errorf("adopt sandbox %s: its backend cannot take over a sandbox of another process", o.ID)
	}
	inst, err := a.Adopt(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("adopt sandbox %s: %w", o.ID, err)
	}
	s := &Sandbox{opts: o, inst: inst, env: baseEnv(o)}
	s.report = Report{SandboxID: o.ID, Labels: o.Labels, PolicyRevision: o.PolicyRevision, Start: time.Now()}
	return s, nil
}

// SetPolicyRevision records the revision of the policy that fronts the sandbox in its
// report, for a caller that learns it after New (a one-shot run makes its sandbox while
// its policy loads).
func (s *Sandbox) SetPolicyRevision(rev string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.report.PolicyRevision = rev
}

// ID is the sandbox's identity id.
func (s *Sandbox) ID() string { return s.opts.ID }

// Identity is what the proxy attributes this sandbox's requests to.
func (s *Sandbox) Identity() Identity { return Identity{ID: s.opts.ID, Labels: s.opts.Labels} }

// Instance is the backend's instance under s, for what only its backend knows (a native
// sandbox's network namespace, for instance); run commands through s, not through it.
func (s *Sandbox) Instance() Instance { return s.inst }

// Env is the environment every command starts with (before Command.Env).
func (s *Sandbox) Env() []string { return append([]string(nil), s.env...) }

// Run runs one command in the sandbox and waits for it. A command that outlives its timeout
// is killed with its whole process tree and the result has TimedOut and exit code 124. The
// returned error is about running the command, not its exit status.
func (s *Sandbox) Run(ctx context.Context, cmd Command) (Result, error) {
	if len(cmd.Args) == 0 {
		return Result{}, errors.New("run: empty command")
	}
	for _, kv := range cmd.Env {
		if !validEnv(kv) {
			return Result{}, fmt.Errorf("run: environment entry %q: want K=V", kv)
		}
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return Result{}, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("run: %w", err) // started, it would be killed at once
	}
	base := s.env
	if cmd.TTY != nil {
		base = MergeEnv(base, []string{cmd.TTY.termEnv()})
	}
	cmd.Env = MergeEnv(base, cmd.Env)
	if cmd.Timeout <= 0 {
		cmd.Timeout = s.opts.Timeout
	}
	if cmd.Dir == "" {
		cmd.Dir = s.DefaultDir()
	}
	res, err := s.inst.Run(ctx, cmd)
	s.mu.Lock()
	s.report.addRun(cmd.Args, res)
	s.mu.Unlock()
	s.event(ctx, Event{Kind: EventRun, Command: cmd.Args[0], ExitCode: res.ExitCode, Signal: res.Signal,
		TimedOut: res.TimedOut, PeakMemory: res.Usage.PeakMemory})
	return res, err
}

// Changes lists what was changed in a copy-on-write workspace; nil otherwise. After Close
// it returns the list taken at Close.
func (s *Sandbox) Changes() ([]Change, error) { return s.inst.Changes() }

// Patch is a git-style diff from the host workspace to the copy-on-write view, for `git
// apply`; call it before Close. When some changes cannot be carried (FIFOs, devices, very
// large files) it returns the patch and an error wrapping ErrPatchIncomplete that names
// them.
func (s *Sandbox) Patch() ([]byte, error) { return s.inst.Patch() }

// WritePatch writes the patch Patch returns to w, one file at a time where the backend can
// (the native one does), so that a large patch is not held in memory; call it before Close.
// The error wraps ErrPatchIncomplete when the patch leaves changes out.
func (s *Sandbox) WritePatch(w io.Writer) error {
	if pw, ok := s.inst.(interface{ WritePatch(io.Writer) error }); ok {
		return pw.WritePatch(w)
	}
	p, err := s.inst.Patch()
	if _, werr := w.Write(p); werr != nil {
		return werr
	}
	return err
}

// Close revokes the sandbox's credential leases, drops its listener and identity, kills
// every process in it and removes its namespaces, mounts, cgroups and directories. It is
// idempotent: later calls, concurrent ones included, wait for the first to finish and
// return its result.
func (s *Sandbox) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true // Run refuses from now on
	s.mu.Unlock()
	s.closeOnce.Do(func() { s.closeErr = s.close(ctx) })
	return s.closeErr
}

func (s *Sandbox) close(ctx context.Context) error {
	var errs []error
	if s.opts.Revoker != nil {
		if err := s.opts.Revoker.RevokeSandbox(ctx, s.opts.ID); err != nil {
			errs = append(errs, fmt.Errorf("revoke credentials: %w", err))
		}
	}
	errs = append(errs, s.inst.Close(ctx))
	changes, err := s.inst.Changes()
	incomplete := ""
	if errors.Is(err, ErrChangesIncomplete) {
		// Not a failure of Close: the report lists what was found and says what was not.
		incomplete = strings.TrimPrefix(err.Error(), ErrChangesIncomplete.Error()+": ")
		err = nil
	}
	errs = append(errs, err)
	swept, sweepErr := s.sweep()
	errs = append(errs, sweepErr)
	err = errors.Join(errs...)
	s.mu.Lock()
	s.report.End = time.Now()
	s.report.Changes = changes
	s.report.ChangesIncomplete = incomplete
	s.report.Removed = swept
	if sweepErr != nil {
		s.report.SweepFailed = sweepErr.Error()
	}
	rep := s.report
	s.mu.Unlock()
	end := Event{Kind: EventEnd, ExitCode: rep.ExitCode, TimedOut: rep.TimedOut, Removed: swept,
		Requests: RequestCounts{Allowed: rep.Requests.Allowed, Denied: rep.Requests.Denied, Approved: rep.Requests.Approved}}
	if err != nil {
		end.Error = err.Error()
	}
	s.event(ctx, end)
	if err != nil {
		return fmt.Errorf("close sandbox %s: %w", s.opts.ID, err)
	}
	return nil
}

// sweep takes away, in a read-write workspace, what the sandbox left that the host's git
// would run, read as configuration, follow or hang on (see sweepWorkspace); the backend has
// ended the sandbox.
func (s *Sandbox) sweep() ([]string, error) {
	p, ok := s.inst.(interface{ Protections() []Protection })
	if !ok || s.opts.WorkspaceMode != WorkspaceRW {
		return nil, nil
	}
	moved, err := sweepWorkspace(s.opts.Workspace, p.Protections())
	if len(moved) > 0 {
		s.opts.Logger.Warn("the sandbox left files the host's git would run, read or block on; moved aside or removed",
			"sandbox", s.opts.ID, "paths", moved)
	}
	if err != nil {
		s.opts.Logger.Error("the workspace sweep could not take away everything the host's git would run, read or block on",
			"sandbox", s.opts.ID, "err", err)
	}
	return moved, err
}

// event hands ev, with the sandbox's id and labels, to Options.OnEvent.
func (s *Sandbox) event(ctx context.Context, ev Event) {
	if s.opts.OnEvent == nil {
		return
	}
	ev.SandboxID = s.opts.ID
	if len(s.opts.Labels) > 0 {
		ev.Labels = s.opts.Labels
	}
	s.opts.OnEvent(ctx, ev)
}
