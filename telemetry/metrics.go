package telemetry

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/airlock-proxy/airlock/internal/event"
)

// Instrument names. Prometheus sees them with dots as underscores, counters with _total and
// seconds histograms with _seconds, e.g. airlock_requests_total.
const (
	MetricRequests           = "airlock.requests"               // counter: decision, rule, phase
	MetricRequestsDenied     = "airlock.requests.denied"        // counter: server.address, rule
	MetricRequestDuration    = "airlock.request.duration"       // histogram (s): decision, phase
	MetricPolicyEvalDuration = "airlock.policy.eval.duration"   // histogram (s): phase, outcome
	MetricApprovalsPending   = "airlock.approvals.pending"      // up-down counter
	MetricApprovalWait       = "airlock.approval.wait.duration" // histogram (s): outcome
	MetricVaultFetches       = "airlock.vault.fetches"          // counter: result, credential
	MetricSandboxesActive    = "airlock.sandboxes.active"       // up-down counter
	MetricConnectionsActive  = "airlock.connections.active"     // up-down counter
	MetricAuditErrors        = "airlock.audit.errors"           // counter
	MetricRedactions         = "airlock.redactions"             // counter: rule
)

// MaxHostLabels bounds the distinct server.address values of airlock.requests.denied, and
// MaxHostLabelsPerSandbox how many of them one sandbox may claim: a host beyond either is
// counted as "other". A sandbox probing random names therefore cannot blow up the series,
// and cannot use up the labels either: it gets its share, and the hosts other sandboxes
// are denied keep their own label. A host that has a label keeps it for every sandbox.
const (
	MaxHostLabels           = 200
	MaxHostLabelsPerSandbox = 20
)

// OtherHost is the server.address of denied hosts that got no label of their own.
const OtherHost = "other"

var (
	fastBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	waitBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600}
)

// Metrics is the typed metrics API. Its methods are safe for concurrent use; a nil
// *Metrics does nothing.
type Metrics struct {
	requests, denied, vault, auditErrs metric.Int64Counter
	redactions                         metric.Int64Counter
	reqDur, policyDur, approvalWait    metric.Float64Histogram
	pending, sandboxes, conns          metric.Int64UpDownCounter

	sets attrSets // attribute sets of the per-request instruments, built once each

	mu        sync.Mutex
	hosts     map[string]struct{} // hosts with their own label
	claimedBy map[string]int      // sandbox id → labels it claimed (at most MaxHostLabels entries)
}

// NewMetrics creates the instruments on a meter.
func NewMetrics(m metric.Meter) (*Metrics, error) {
	x := &Metrics{hosts: make(map[string]struct{}), claimedBy: make(map[string]int)}
	var err error
	counter := func(name, desc, unit string) metric.Int64Counter {
		c, e := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		err = firstErr(err, e, name)
		return c
	}
	updown := func(name, desc, unit string) metric.Int64UpDownCounter {
		c, e := m.Int64UpDownCounter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		err = firstErr(err, e, name)
		return c
	}
	hist := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, e := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(buckets...))
		err = firstErr(err, e, name)
		return h
	}
	x.requests = counter(MetricRequests, "Requests and CONNECTs decided, by decision and rule.", "{request}")
	x.denied = counter(MetricRequestsDenied, "Denied requests by destination host (bounded) and rule.", "{request}")
	x.reqDur = hist(MetricRequestDuration, "Time from receiving a request to finishing its response.", fastBuckets)
	x.policyDur = hist(MetricPolicyEvalDuration, "Time to evaluate the policy.", fastBuckets)
	x.pending = updown(MetricApprovalsPending, "Requests waiting for approval.", "{request}")
	x.approvalWait = hist(MetricApprovalWait, "Time a request waited for approval.", waitBuckets)
	x.vault = counter(MetricVaultFetches, "Credential lookups by result (hit, miss, error).", "{fetch}")
	x.sandboxes = updown(MetricSandboxesActive, "Sandboxes running.", "{sandbox}")
	x.conns = updown(MetricConnectionsActive, "Client connections open.", "{connection}")
	x.auditErrs = counter(MetricAuditErrors, "Audit records that could not be written.", "{event}")
	x.redactions = counter(MetricRedactions, "Attached credentials the scrubber redacted from responses (the upstream echoed them), by rule.", "{redaction}")
	if err != nil {
		return nil, err
	}
	return x, nil
}

func firstErr(prev, err error, name string) error {
	if prev != nil || err == nil {
		return prev
	}
	return fmt.Errorf("telemetry: instrument %s: %w", name, err)
}

// RequestDone counts a finished request and records its duration.
func (m *Metrics) RequestDone(ctx context.Context, f RequestFacts) {
	if m == nil {
		return
	}
	dec := decisionLabel(f.Decision)
	m.requests.Add(ctx, 1, m.sets.get(attrKey{"requests", dec, f.Rule, f.Phase}, func() []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("decision", dec), attribute.String("rule", f.Rule), attribute.String("phase", f.Phase)}
	}).add...)
	m.reqDur.Record(ctx, f.Duration.Seconds(), m.sets.get(attrKey{"duration", dec, f.Phase, ""}, func() []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("decision", dec), attribute.String("phase", f.Phase)}
	}).record...)
	if f.Redactions > 0 {
		m.redactions.Add(ctx, f.Redactions, metric.WithAttributes(attribute.String("rule", f.Rule)))
	}
	if dec == string(event.DecisionDeny) || dec == string(event.DecisionWouldDeny) {
		m.denied.Add(ctx, 1, metric.WithAttributes(
			attribute.String("server.address", m.hostLabel(f.SandboxID, f.Host)), attribute.String("rule", f.Rule)))
	}
}

// hostLabel is the server.address label for host denied to sandbox: the host itself if it
// has a label or may claim one (within both bounds), else OtherHost.
func (m *Metrics) hostLabel(sandbox, host string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.hosts[host]; ok {
		return host
	}
	if len(m.hosts) >= MaxHostLabels || m.claimedBy[sandbox] >= MaxHostLabelsPerSandbox {
		return OtherHost
	}
	m.hosts[host] = struct{}{}
	m.claimedBy[sandbox]++
	return host
}

// PolicyEval records one policy evaluation; failed is true when it returned an error.
func (m *Metrics) PolicyEval(ctx context.Context, phase string, d time.Duration, failed bool) {
	if m == nil {
		return
	}
	outcome := "ok"
	if failed {
		outcome = "error"
	}
	m.policyDur.Record(ctx, d.Seconds(), m.sets.get(attrKey{"policy", phase, outcome, ""}, func() []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("phase", phase), attribute.String("outcome", outcome)}
	}).record...)
}

// ApprovalStarted and ApprovalDone bracket a held request.
func (m *Metrics) ApprovalStarted(ctx context.Context) {
	if m != nil {
		m.pending.Add(ctx, 1)
	}
}

// ApprovalDone records how long a held request waited and how it ended: its outcome label
// is the approval record's final state (an event.ApprovalState: approved, denied,
// cancelled, expired, disconnected) or, when failed (no answer could be had, such as the
// approval store being unavailable), "error".
func (m *Metrics) ApprovalDone(ctx context.Context, state event.ApprovalState, failed bool, waited time.Duration) {
	if m == nil {
		return
	}
	outcome := string(state)
	if failed {
		outcome = "error"
	}
	m.pending.Add(ctx, -1)
	m.approvalWait.Record(ctx, waited.Seconds(), metric.WithAttributes(attribute.String("outcome", outcome)))
}

// VaultFetch counts a credential lookup: result is "hit" (cache), "miss" (fetched from
// Vault) or "error"; credential is the configured name.
func (m *Metrics) VaultFetch(ctx context.Context, credential, result string) {
	if m == nil {
		return
	}
	m.vault.Add(ctx, 1, m.sets.get(attrKey{"vault", result, credential, ""}, func() []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("result", result), attribute.String("credential", credential)}
	}).add...)
}

// SandboxStarted / SandboxEnded track running sandboxes.
func (m *Metrics) SandboxStarted(ctx context.Context) {
	if m != nil {
		m.sandboxes.Add(ctx, 1)
	}
}

// SandboxEnded is the counterpart of SandboxStarted.
func (m *Metrics) SandboxEnded(ctx context.Context) {
	if m != nil {
		m.sandboxes.Add(ctx, -1)
	}
}

// ConnOpened / ConnClosed track client connections.
func (m *Metrics) ConnOpened(ctx context.Context) {
	if m != nil {
		m.conns.Add(ctx, 1)
	}
}

// ConnClosed is the counterpart of ConnOpened.
func (m *Metrics) ConnClosed(ctx context.Context) {
	if m != nil {
		m.conns.Add(ctx, -1)
	}
}

// AuditError counts an audit record that could not be written.
func (m *Metrics) AuditError(ctx context.Context) {
	if m != nil {
		m.auditErrs.Add(ctx, 1)
	}
}

// attrSets holds the attribute set of each label combination the per-request instruments
// have seen, as ready measurement options: building a set (sorting, hashing, allocating)
// and the option slice for every request was a sizeable part of the metrics' cost. The
// combinations are as many as the metrics' own series (decisions × rules × phases); past
// maxAttrSets, options are built each time instead of kept.
type attrSets struct {
	m sync.Map // attrKey → *attrOpts
	n atomic.Int64
}

// maxAttrSets bounds the kept sets (a variable for tests).
var maxAttrSets int64 = 4096

// attrKey names one label combination of one instrument.
type attrKey struct{ inst, a, b, c string }

// attrOpts are one attribute set as the options of Add and Record.
type attrOpts struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

func (s *attrSets) get(k attrKey, attrs func() []attribute.KeyValue) *attrOpts {
	if o, ok := s.m.Load(k); ok {
		return o.(*attrOpts)
	}
	set := metric.WithAttributeSet(attribute.NewSet(attrs()...))
	o := &attrOpts{add: []metric.AddOption{set}, record: []metric.RecordOption{set}}
	if s.n.Load() < maxAttrSets {
		if _, loaded := s.m.LoadOrStore(k, o); !loaded {
			s.n.Add(1)
		}
	}
	return o
}
