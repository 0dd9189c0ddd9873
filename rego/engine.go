package rego

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/airlock-proxy/airlock/internal/panicinfo"
	"github.com/airlock-proxy/airlock/internal/redact"
)

// Defaults for Options.
const (
	DefaultTimeout = 250 * time.Millisecond
	DefaultPoll    = time.Minute
)

// ErrNoDecision is returned when the policy leaves data.airlock.decision undefined.
var ErrNoDecision = errors.New("policy made no decision (data.airlock.decision is undefined)")

// ErrTimeout is returned when an evaluation takes longer than Options.Timeout.
var ErrTimeout = errors.New("policy evaluation timed out")

// ErrPanicked is returned when OPA panicked evaluating an input: the request is refused.
var ErrPanicked = errors.New("policy evaluation failed on this input (an internal error, logged)")

// Options configure an Engine. The zero value evaluates the shipped policy.
type Options struct {
	// Dir is a policy directory: .rego files (with their _test.rego tests) and data.json /
	// data.yaml documents, loaded as `opa eval -d DIR` would. "" with no Bundle: the shipped
	// policy embedded in the binary.
	Dir string
	// Bundle is an OPA bundle (.tar.gz with .manifest): a file path or an http(s) URL.
	// Exclusive with Dir.
	Bundle string
	// BundleVerification, when set, requires the bundle to be signed with this key.
	BundleVerification *BundleVerification
	// AllowInsecureHTTP lets an unsigned bundle be fetched over plain http:// (with a
	// warning); without it, New refuses such a URL (ErrInsecureBundleURL).
	AllowInsecureHTTP bool
	// MaxBundleBytes bounds a bundle: its file, its uncompressed tar stream and so every
	// file in it; default DefaultMaxBundleBytes. MaxBundleFiles bounds its entries;
	// default DefaultMaxBundleFiles. Over either, the bundle is refused (ErrBundleTooLarge).
	MaxBundleBytes int64
	MaxBundleFiles int
	// Poll is how often Watch re-reads a bundle (file or URL); default DefaultPoll.
	Poll time.Duration
	// Timeout bounds each evaluation; default DefaultTimeout. A timed-out evaluation denies.
	Timeout time.Duration
	// HTTPClient fetches bundle URLs; nil uses a client with a 30s timeout.
	HTTPClient *http.Client
	// Logger receives load and reload events; nil discards them.
	Logger *slog.Logger
	// NoDecisionCache evaluates every input, even one decided before (benchmarks, or a
	// policy whose data changes under it).
	NoDecisionCache bool
}

// Status describes the policy in force, for the admin API.
type Status struct {
	Revision    string    `json:"revision"` // bundle manifest revision, or "sha256:" of the policy files
	Source      string    `json:"source"`
	LoadedAt    time.Time `json:"loaded_at"`
	LastError   string    `json:"last_error,omitempty"` // why the last reload was refused, until one succeeds
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
}

// Engine evaluates data.airlock.decision with a prepared query. It is safe for concurrent use;
// Reload swaps in a new policy atomically and never replaces a good policy with a broken one.
type Engine struct {
	opts Options
	log  *slog.Logger
	cur  atomic.Pointer[snapshot] // nil only while Start's first load runs, or after it failed

	// Set by Start: loaded is closed once the first load is over, loadErr why it failed.
	loaded  chan struct{}
	loadErr error

	reloadMu sync.Mutex // serialises reloads; guards etag
	etag     string     // of the last bundle fetched from a URL

	statusMu    sync.Mutex
	lastErr     string
	lastErrTime time.Time
}

// New loads, compiles and tests the policy. It fails when the policy cannot be used; the error
// names the file and line at fault.
func New(ctx context.Context, o Options) (*Engine, error) {
	e, err := newEngine(o)
	if err != nil {
		return nil, err
	}
	if err := e.loadFirst(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// Start is New that returns at once and loads the policy in the background, for a caller
// with other work to do meanwhile (a one-shot sandbox run creates its sandbox). Until the
// policy is loaded every method waits for it; Wait returns New's error, if any. An engine
// whose policy did not load decides nothing: Decide and Eval return its error (and the
// proxy refuses the request), Revision is "".
func Start(ctx context.Context, o Options) *Engine {
	e, err := newEngine(o)
	if err != nil {
		e = &Engine{opts: o, log: slog.New(slog.DiscardHandler)}
		e.loaded, e.loadErr = make(chan struct{}), err
		close(e.loaded)
		return e
	}
	e.loaded = make(chan struct{})
	go func() {
		defer close(e.loaded)
		e.loadErr = e.loadFirst(ctx) // ends with ctx, as New does: a run stopped meanwhile stops its load
	}()
	return e
}

// Wait waits for the policy of an engine made by Start to be loaded and returns why it
// could not be, as New would have; at once for an engine made by New.
func (e *Engine) Wait(ctx context.Context) error {
	_, err := e.snapshot(ctx)
	return err
}

// snapshot is the policy in force, once there is one (see Start).
func (e *Engine) snapshot(ctx context.Context) (*snapshot, error) {
	if snap := e.cur.Load(); snap != nil {
		return snap, nil
	}
	select {
	case <-e.loaded:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for the policy to load: %w", ctx.Err())
	}
	if snap := e.cur.Load(); snap != nil {
		return snap, nil
	}
	return nil, e.loadErr
}

// newEngine checks o and fills in its defaults.
func newEngine(o Options) (*Engine, error) {
	if o.Dir != "" && o.Bundle != "" {
		return nil, errors.New("policy: set a directory or a bundle, not both")
	}
	if o.Timeout < 0 || o.Poll < 0 || o.MaxBundleBytes < 0 || o.MaxBundleFiles < 0 {
		return nil, errors.New("policy: timeout, poll interval and bundle bounds must not be negative")
	}
	if o.MaxBundleBytes == 0 {
		o.MaxBundleBytes = DefaultMaxBundleBytes
	}
	if o.MaxBundleFiles == 0 {
		o.MaxBundleFiles = DefaultMaxBundleFiles
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Poll == 0 {
		o.Poll = DefaultPoll
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Engine{opts: o, log: log.With("component", "policy")}
	if isURL(o.Bundle) {
		if err := e.checkBundleTransport(o.Bundle); err != nil {
			return nil, err
		}
		if insecureBundleURL(o.Bundle) && o.BundleVerification == nil {
			e.log.Warn("loading an unsigned policy bundle over plain http (policy_options.allow_insecure_http): anyone on the network path can replace the policy",
				"bundle", e.bundleName())
		}
	}
	return e, nil
}

// loadFirst loads the policy the engine starts with.
func (e *Engine) loadFirst(ctx context.Context) error {
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	src, err := e.fetch(ctx)
	if err != nil {
		return err
	}
	snap, err := load(ctx, src)
	if err != nil {
		return err
	}
	if e.opts.NoDecisionCache {
		snap.cache = nil
	}
	e.cur.Store(snap)
	e.log.Info("policy loaded", "source", snap.source, "revision", snap.revision)
	return nil
}

// Decide evaluates the policy for one input. An evaluation error, a timeout or an undefined
// decision returns the zero Decision (deny) and an error. A decision that breaks the contract
// (an unknown action, credentials that are not strings, ...) returns a deny whose Reason says
// what is wrong, and no error.
func (e *Engine) Decide(ctx context.Context, in *Input) (Decision, error) {
	d, _, err := e.eval(ctx, in, false)
	return d, err
}

// Eval is Decide that can also return OPA's trace of the evaluation (explain), for
// `airlock policy eval --explain`.
func (e *Engine) Eval(ctx context.Context, in *Input, explain bool) (Decision, string, error) {
	return e.eval(ctx, in, explain)
}

// Revision returns the revision of the policy in force ("" when Start's load failed).
func (e *Engine) Revision() string {
	snap, err := e.snapshot(context.Background())
	if err != nil {
		return ""
	}
	return snap.revision
}

// Status reports the policy in force and the last reload error.
func (e *Engine) Status() Status {
	snap, err := e.snapshot(context.Background())
	if err != nil {
		return Status{Source: e.source(), LastError: redact.Error(err).Error()}
	}
	e.statusMu.Lock()
	defer e.statusMu.Unlock()
	return Status{
		Revision:    snap.revision,
		Source:      snap.source,
		LoadedAt:    snap.loadedAt,
		LastError:   e.lastErr,
		LastErrorAt: e.lastErrTime,
	}
}

func (e *Engine) eval(ctx context.Context, in *Input, explain bool) (Decision, string, error) {
	if in == nil {
		return Decision{}, "", errors.New("evaluate policy: no input")
	}
	if err := ctx.Err(); err != nil {
		return Decision{}, "", fmt.Errorf("evaluate policy: %w", err)
	}
	snap := e.cur.Load() // snapshot's own first step, kept inline on every request's path
	if snap == nil {
		var err error
		if snap, err = e.snapshot(ctx); err != nil {
			return Decision{}, "", fmt.Errorf("evaluate policy: %w", err)
		}
	}
	var key cacheKey
	// Exec inputs are not cached: commands are few, and the key covers requests only.
	cached := snap.cache != nil && !explain && in.Phase != PhaseExec
	if cached {
		key = snap.cache.key(in)
		if d, ok := snap.cache.get(key); ok {
			return d, "", nil
		}
	}
	return e.evalQuery(ctx, snap, in, explain, cached, key)
}

// evalQuery evaluates the policy for in (a decision the cache does not hold) and caches
// the result when cached is set. Out of line from eval: its frame is large, and a cached
// decision, the common case, should not put it on the request goroutine's stack (an idle
// keep-alive connection keeps the stack its request grew).
//
//go:noinline
func (e *Engine) evalQuery(ctx context.Context, snap *snapshot, in *Input, explain, cached bool, key cacheKey) (dec Decision, trace string, err error) {
	defer func() {
		// OPA panics on some values (red team: a number past math/big's exponent limit in
		// a comparison). Whatever the cause, the evaluation fails, and the request with it,
		// instead of the process: a request the proxy serves inside an intercepted tunnel
		// runs in a goroutine that nothing else recovers.
		if v := recover(); v != nil {
			e.log.Error("policy evaluation panicked; refused", "revision", snap.revision, "panic", panicinfo.Describe(v))
			dec, trace, err = Decision{}, "", fmt.Errorf("evaluate policy %s: %w", snap.revision, ErrPanicked)
		}
	}()
	// One Cancel serves both the caller's context and the per-evaluation timeout; this avoids
	// the goroutine OPA would start per evaluation to watch the context.
	cancel := startEvalCancel(ctx, e.opts.Timeout)
	defer cancel.stop() // after the outcome below has read cancel.timedOut

	q := topdown.NewQuery(snap.query).
		WithQueryCompiler(snap.qc).
		WithCompiler(snap.compiler).
		WithStore(snap.store).
		WithTransaction(snap.txn).
		WithBaseCache(snap.data).
		WithInput(ast.NewTerm(inputValueReusing(in, snap.use, &snap.sbx))).
		WithCancel(cancel).
		WithMetrics(metrics.NoOp()).
		WithStrictBuiltinErrors(true).
		WithIndexing(true).
		WithEarlyExit(true)
	var buf *topdown.BufferTracer
	if explain {
		buf = topdown.NewBufferTracer()
		q = q.WithQueryTracer(buf)
	}
	var result *ast.Term
	n := 0
	err = q.Iter(ctx, func(qr topdown.QueryResult) error {
		result = qr[resultVar]
		n++
		return nil
	})
	if buf != nil {
		var sb strings.Builder
		topdown.PrettyTraceWithLocation(&sb, *buf)
		trace = sb.String()
	}
	switch {
	case err != nil && cancel.timedOut.Load():
		return Decision{}, trace, fmt.Errorf("evaluate policy %s: %w after %s", snap.revision, ErrTimeout, e.opts.Timeout)
	case err != nil && ctx.Err() != nil:
		return Decision{}, trace, fmt.Errorf("evaluate policy %s: %w", snap.revision, ctx.Err())
	case err != nil:
		return Decision{}, trace, fmt.Errorf("evaluate policy %s: %w", snap.revision, err)
	case n == 0 || result == nil:
		return Decision{}, trace, fmt.Errorf("evaluate policy %s: %w", snap.revision, ErrNoDecision)
	case n > 1:
		return Decision{}, trace, fmt.Errorf("evaluate policy %s: %d decisions, want one", snap.revision, n)
	}
	d, err := parseDecision(result.Value)
	if err != nil {
		e.log.Warn("policy returned a malformed decision; denied", "revision", snap.revision, "rule", d.Rule, "err", err)
	}
	if cached {
		snap.cache.put(key, d)
	}
	return d, trace, nil
}

// source names where the policy comes from, as Status gives it.
func (e *Engine) source() string {
	switch {
	case e.opts.Bundle != "":
		return e.bundleName()
	case e.opts.Dir != "":
		return e.opts.Dir
	}
	return "shipped policy"
}
