// Package session keeps sandboxes alive between commands for agent harnesses: a sandbox is
// created once, then commands are executed in it one after another (each under the
// policy's exec phase, audited, traced and attributed), files are put and got, and it ends
// when deleted, when its ttl or idle timeout passes, or when its airlock stops. The admin
// API serves it (Routes); Client speaks that API.
package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/image"
)

// State is where a session is in its life.
type State string

// States.
const (
	StateRunning State = "running"
	StateEnding  State = "ending" // being destroyed
	StateEnded   State = "ended"
)

// Defaults.
const (
	DefaultTTL          = time.Hour
	DefaultIdleTimeout  = 15 * time.Minute
	DefaultMaxTTL       = 24 * time.Hour
	DefaultMaxSessions  = 32
	DefaultMaxFileBytes = 8 << 20
	// DefaultStateDir holds one record per session, for every airlock on the machine:
	// replicas sharing it know whose a session is, and a restarted airlock finds the
	// sessions of its previous run.
	DefaultStateDir = "/run/airlock/sessions"
	// maxTombstones bounds the ended sessions remembered (for their reports and for a
	// clear answer to a late exec).
	maxTombstones = 256
	// maxExecRecords bounds the exec results a session keeps for clients that lost their
	// stream.
	maxExecRecords = 1024
)

// Errors, each answered with its own status by the API (statusOf).
var (
	ErrNotFound   = errors.New("not found")
	ErrGone       = errors.New("sandbox was deleted")
	ErrBadRequest = errors.New("bad request")
	ErrTooLarge   = errors.New("too large")
	ErrLimit      = errors.New("limit reached")
	ErrConflict   = errors.New("conflict")
)

// NotOwnerError: the sandbox belongs to another airlock process (a replica).
type NotOwnerError struct {
	ID, Owner string
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("sandbox %s belongs to another airlock (%s): send its requests there", e.ID, e.Owner)
}

// Spec is what POST /v1/sandboxes asks for. Sizes take k/M/G suffixes; durations are Go
// durations ("30m").
type Spec struct {
	ID        string            `json:"id,omitempty"`
	Workspace string            `json:"workspace,omitempty"` // DIR, DIR:ro or DIR:cow
	Memory    string            `json:"memory,omitempty"`
	Pids      int64             `json:"pids,omitempty"`
	CPUs      float64           `json:"cpus,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Backend   string            `json:"backend,omitempty"` // native (default), docker or kubernetes
	// Image is the sandbox's image: for docker and kubernetes the container's; for native
	// an image of the proxy host's Docker engine, or an absolute path (a docker save or OCI
	// tarball, an OCI layout directory) under sessions.rootfs_roots, unpacked once into the
	// image cache and shown read-only as the sandbox's root.
	Image string `json:"image,omitempty"`
	// Rootfs is a native sandbox's root file system: a directory of the proxy's host under
	// sessions.rootfs_roots, shown read-only. At most one of Image and Rootfs.
	Rootfs      string `json:"rootfs,omitempty"`
	TTL         string `json:"ttl,omitempty"`
	IdleTimeout string `json:"idle_timeout,omitempty"`
	// Timeout is the default limit of each command (0: none beyond the sandbox's life).
	Timeout string `json:"timeout,omitempty"`
}

// Info is what GET /v1/sandboxes[/{id}] shows.
type Info struct {
	ID          string            `json:"id"`
	State       State             `json:"state"`
	Owner       string            `json:"owner"`
	Labels      map[string]string `json:"labels,omitempty"`
	Backend     string            `json:"backend"`
	Workspace   string            `json:"workspace,omitempty"`
	Created     time.Time         `json:"created"`
	Expires     time.Time         `json:"expires"`
	IdleTimeout string            `json:"idle_timeout"`
	LastActive  time.Time         `json:"last_active"`
	Execs       int               `json:"execs"`
	Running     int               `json:"running"`
	Ended       time.Time         `json:"ended,omitzero"`
	EndReason   string            `json:"end_reason,omitempty"`
}

// Options configure a Manager. Base carries what the server decides for every sandbox
// (proxy, CA bundle, revoker, hidden paths, events, logger); a Spec never overrides it.
// Base.Backend is the backend of native specs (a *native.Native; sandboxes cannot be
// created without one).
type Options struct {
	Base sandbox.Options
	// Backend returns the backend for a spec's backend name and image; nil serves the
	// native backend only.
	Backend func(ctx context.Context, name, image string) (sandbox.Backend, error)
	Decider Decider  // the exec phase; nil allows every command
	Approve Approver // holds commands the policy sends for approval; nil refuses them
	Auditor Auditor  // may be nil
	Tracer  trace.Tracer
	// Owner names this airlock to other replicas (its admin URL, or host:pid).
	Owner    string
	StateDir string // default DefaultStateDirForUser()

	defaultStateDir bool // StateDir was defaulted (from the environment, for a rootless airlock)
	// Defaults and bounds of the sessions: a create may ask for a ttl up to MaxTTL
	// (default DefaultMaxTTL) and an idle timeout up to MaxIdleTimeout (default MaxTTL).
	// Its memory, pids and cpus are bounded by Base's (Base.Memory 0: the backend's
	// default, sandbox.DefaultMemory; Base.Pids 0: sandbox.DefaultPids; Base.CPUs 0: none),
	// which are also their defaults.
	TTL, IdleTimeout, MaxTTL, MaxIdleTimeout time.Duration
	// MaxExecTimeout bounds each command's timeout and is its default (0: none beyond the
	// session's life).
	MaxExecTimeout time.Duration
	MaxSessions    int
	MaxFileBytes   int64
	// WorkspaceRoots are the host directories a session's workspace may be (or be under);
	// none: a create that names a workspace is refused. An issuer token is not the host's
	// root: without this bound it could mount /etc read-write.
	WorkspaceRoots []string
	// RootfsRoots are the host directories a native session's rootfs, or an image given by
	// path, may be (or be under); none: such a create is refused. Images of the local
	// Docker engine need none.
	RootfsRoots []string
	// Images unpacks the images of native sessions; nil: a native session takes no image.
	Images *image.Cache
	// SweepInterval is how often ttl and idle timeouts are checked; default 1s.
	SweepInterval time.Duration
	// Started and Ended are told of each session's sandbox (for the report's request
	// counts); either may be nil.
	Started func(*sandbox.Sandbox)
	Ended   func(id string)
	Logger  *slog.Logger
	Now     func() time.Time
}

// Manager owns the sessions of this airlock process.
type Manager struct {
	opts  Options
	log   *slog.Logger
	creds *Credentials
	reg   *registry

	mu        sync.Mutex
	sessions  map[string]*Session
	ended     map[string]*tombstone
	endedList []string
	closed    bool

	stop chan struct{}
	done chan struct{}
}

// tombstone is what is left of an ended session.
type tombstone struct {
	info   Info
	report sandbox.Report
	execs  map[string]*ExecResult
}

// New returns a Manager and starts its ttl and idle sweep. creds, shared with the proxy
// (proxy.Options.Execs), attributes commands' requests; it may be nil.
func New(o Options, creds *Credentials) (*Manager, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Tracer == nil {
		o.Tracer = noop.NewTracerProvider().Tracer("")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if creds == nil {
		creds = NewCredentials()
	}
	reg, err := openRegistry(o.StateDir, o.Owner, o.defaultStateDir)
	if err != nil {
		return nil, err
	}
	m := &Manager{opts: o, log: o.Logger.With("component", "sessions"), creds: creds, reg: reg,
		sessions: map[string]*Session{}, ended: map[string]*tombstone{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go m.sweepLoop()
	return m, nil
}

// Session is one live sandbox of a Manager.
type Session struct {
	m           *Manager
	id          string
	spec        Spec
	sb          *sandbox.Sandbox
	backend     string
	created     time.Time
	expires     time.Time
	idle        time.Duration
	execTimeout time.Duration

	mu         sync.Mutex
	state      State
	lastActive time.Time
	running    int
	nexec      int
	execs      map[string]*ExecResult
	execOrder  []string
	saved      int        // results in the registry's file (execlog.go)
	persistMu  sync.Mutex // orders writes of that file
	cancels    map[string]context.CancelFunc
	endOnce    sync.Once
	endDone    chan struct{}
	report     sandbox.Report
	endReason  string
	endErr     error
}

// Create starts a sandbox for spec.
func (m *Manager) Create(ctx context.Context, spec Spec) (Info, error) {
	o, backendName, ttl, idle, execTimeout, err := m.options(ctx, spec)
	if err != nil {
		return Info{}, err
	}
	m.mu.Lock()
	switch {
	case m.closed:
		m.mu.Unlock()
		return Info{}, fmt.Errorf("%w: airlock is shutting down", ErrConflict)
	case len(m.sessions) >= m.opts.MaxSessions:
		m.mu.Unlock()
		return Info{}, fmt.Errorf("%w: %d sandboxes are live (sessions.max_sessions); delete one first", ErrLimit, m.opts.MaxSessions)
	}
	if _, ok := m.sessions[o.ID]; ok {
		m.mu.Unlock()
		return Info{}, fmt.Errorf("%w: sandbox %s already exists", ErrConflict, o.ID)
	}
	// The place is taken now, so that two creates of one id do not both start.
	m.sessions[o.ID] = nil
	m.mu.Unlock()
	release := func() {
		m.mu.Lock()
		delete(m.sessions, o.ID)
		m.mu.Unlock()
	}
	spec.ID = o.ID
	now := m.opts.Now()
	if err := m.reg.claim(record{ID: o.ID, Backend: backendName, Spec: &spec, Created: now, Expires: now.Add(ttl)}); err != nil {
		release()
		return Info{}, err
	}
	if backendName != "native" || m.opts.Backend != nil {
		if m.opts.Backend == nil {
			m.reg.release(o.ID)
			release()
			return Info{}, fmt.Errorf("%w: backend %q is not served here; want native", ErrBadRequest, backendName)
		}
		b, err := m.opts.Backend(ctx, backendName, spec.Image)
		if err != nil {
			m.reg.release(o.ID)
			release()
			return Info{}, fmt.Errorf("%w: backend %s: %v", ErrBadRequest, backendName, err)
		}
		o.Backend = b
	}
	sb, err := sandbox.New(context.WithoutCancel(ctx), o)
	if err != nil {
		m.reg.release(o.ID)
		release()
		return Info{}, err
	}
	if m.opts.Started != nil {
		m.opts.Started(sb)
	}
	s := m.add(sb, spec, backendName, now, now.Add(ttl), idle, execTimeout)
	m.log.Info("sandbox session created", "sandbox", s.id, "backend", backendName, "expires", s.expires)
	return s.info(), nil
}

// Get returns the session id: ErrGone for one that ended here, a NotOwnerError for one of
// another airlock, ErrNotFound otherwise.
func (m *Manager) Get(id string) (*Session, error) {
	if err := identity.CheckID(id); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	m.mu.Lock()
	s := m.sessions[id]
	t := m.ended[id]
	m.mu.Unlock()
	switch {
	case s != nil:
		return s, nil
	case t != nil:
		return nil, fmt.Errorf("%w: sandbox %s ended at %s (%s)", ErrGone, id, t.info.Ended.Format(time.RFC3339), t.info.EndReason)
	}
	if owner, ok := m.reg.ownerOf(id); ok {
		return nil, &NotOwnerError{ID: id, Owner: owner}
	}
	return nil, fmt.Errorf("%w: no sandbox %q on this airlock", ErrNotFound, id)
}

// Info returns the session's or the ended session's description.
func (m *Manager) Info(id string) (Info, error) {
	s, err := m.Get(id)
	if err == nil {
		return s.info(), nil
	}
	if t := m.tombstone(id); t != nil {
		return t.info, nil
	}
	return Info{}, err
}

func (m *Manager) tombstone(id string) *tombstone {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ended[id]
}

// List describes the live sessions, oldest first.
func (m *Manager) List() []Info {
	m.mu.Lock()
	var ss []*Session
	for _, s := range m.sessions {
		if s != nil {
			ss = append(ss, s)
		}
	}
	m.mu.Unlock()
	out := make([]Info, 0, len(ss))
	for _, s := range ss {
		out = append(out, s.info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out
}

// Delete destroys the session and returns its report. Concurrent deletes wait for the
// first and return the same report; a delete of an ended session returns its report.
func (m *Manager) Delete(ctx context.Context, id string) (sandbox.Report, error) {
	s, err := m.Get(id)
	if err != nil {
		if t := m.tombstone(id); t != nil {
			return t.report, nil
		}
		return sandbox.Report{}, err
	}
	return s.end(ctx, "deleted")
}

// Report is the session's report so far, or the ended session's.
func (m *Manager) Report(id string) (sandbox.Report, error) {
	s, err := m.Get(id)
	if err == nil {
		return s.sb.Report(), nil
	}
	if t := m.tombstone(id); t != nil {
		return t.report, nil
	}
	return sandbox.Report{}, err
}

func (s *Session) info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.spec.Workspace
	return Info{ID: s.id, State: s.state, Owner: s.m.reg.owner, Labels: s.spec.Labels, Backend: s.backend,
		Workspace: ws, Created: s.created, Expires: s.expires, IdleTimeout: s.idle.String(),
		LastActive: s.lastActive, Execs: s.nexec, Running: s.running, EndReason: s.endReason}
}

// touch records activity (an exec or a file operation) against the idle timeout.
func (s *Session) touch() {
	s.mu.Lock()
	s.lastActive = s.m.opts.Now()
	s.mu.Unlock()
}

// Sandbox is the session's sandbox (for changes and patches).
func (s *Session) Sandbox() *sandbox.Sandbox { return s.sb }

// ID is the session's sandbox id.
func (s *Session) ID() string { return s.id }

// statusOf maps an error of this package to an HTTP status, in one place.
func statusOf(err error) int {
	var no *NotOwnerError
	switch {
	case errors.As(err, &no):
		return http.StatusConflict
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrGone), errors.Is(err, sandbox.ErrClosed):
		return http.StatusGone
	case errors.Is(err, ErrBadRequest):
		return http.StatusBadRequest
	case errors.Is(err, ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrLimit):
		return http.StatusTooManyRequests
	case errors.Is(err, ErrConflict), errors.Is(err, sandbox.ErrExists):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}
