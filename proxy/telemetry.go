package proxy

import (
	"context"
	"encoding/hex"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/telemetry"
)

// Telemetry receives what the proxy observes, for spans and metrics. The same audit.Event
// that goes to the audit sink ends each request, so both carry the same fields.
// OTel (below) implements it; nil in Options means none.
type Telemetry interface {
	ConnectionOpened()
	ConnectionClosed()
	// RequestStarted starts the request's span; end is called once with the final event,
	// after which the event carries the trace and span ids.
	RequestStarted(ctx context.Context, r *http.Request) (_ context.Context, end func(ev *audit.Event))
	// Step starts a child span: "policy", "approval", "credentials" or "upstream" (whose
	// traceparent is injected into out). done takes an error class, "" for success.
	Step(ctx context.Context, step, phase string, out *http.Request) (_ context.Context, done func(errClass string))
	// Held brackets an approval wait. done takes the approval record's final state, or
	// failed when no answer could be had.
	Held(ctx context.Context) (done func(state event.ApprovalState, failed bool, waited time.Duration))
}

type noTelemetry struct{}

func (noTelemetry) ConnectionOpened() {}
func (noTelemetry) ConnectionClosed() {}
func (noTelemetry) RequestStarted(ctx context.Context, _ *http.Request) (context.Context, func(*audit.Event)) {
	return ctx, func(*audit.Event) {}
}
func (noTelemetry) Step(ctx context.Context, _, _ string, _ *http.Request) (context.Context, func(string)) {
	return ctx, func(string) {}
}
func (noTelemetry) Held(context.Context) func(event.ApprovalState, bool, time.Duration) {
	return func(event.ApprovalState, bool, time.Duration) {}
}

// OTel reports to OpenTelemetry through the telemetry package.
type OTel struct {
	T *telemetry.Telemetry
	// TrustClientTraceparent makes a sandbox's traceparent the parent of the request span;
	// by default it is only recorded as a link.
	TrustClientTraceparent bool
}

var _ Telemetry = (*OTel)(nil)

func (o *OTel) ConnectionOpened() { o.T.Metrics().ConnOpened(context.Background()) }
func (o *OTel) ConnectionClosed() { o.T.Metrics().ConnClosed(context.Background()) }

func (o *OTel) RequestStarted(ctx context.Context, r *http.Request) (context.Context, func(*audit.Event)) {
	ctx, span := telemetry.StartRequestSpan(ctx, o.T.Tracer(), r, o.TrustClientTraceparent)
	return ctx, func(ev *audit.Event) {
		if ev.TraceID == "" { // the decision record set them already when there was one
			ev.TraceID, ev.SpanID = traceIDs(span.SpanContext())
		}
		f := facts(ev)
		telemetry.EndRequestSpan(span, f)
		o.T.Metrics().RequestDone(ctx, f)
	}
}

func (o *OTel) Step(ctx context.Context, step, phase string, out *http.Request) (context.Context, func(string)) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return o.unrecordedStep(ctx, step, phase, out)
	}
	s := &stepSpan{o: o, phase: phase}
	switch step {
	case "policy":
		s.start, s.policy = time.Now(), true
		ctx, s.span = telemetry.StartPolicySpan(ctx, o.T.Tracer(), phase)
		s.ctx = ctx
	case "upstream":
		ctx, s.span = telemetry.StartUpstreamSpan(ctx, o.T.Tracer(), out)
	case "approval":
		ctx, s.span = telemetry.StartApprovalSpan(ctx, o.T.Tracer(), "")
	default:
		ctx, s.span = o.T.Tracer().Start(ctx, "airlock."+step)
	}
	return ctx, s.done
}

// unrecordedStep is Step under a request span that records nothing (no span exporter:
// every span is dropped, though each still gets ids): no child span is started, which
// was 2-3% of the proxy's CPU per request. The upstream still gets a traceparent, the
// request span's, so that its records name the trace and span of airlock's audit record;
// the policy step still records its duration metric.
func (o *OTel) unrecordedStep(ctx context.Context, step, phase string, out *http.Request) (context.Context, func(string)) {
	switch step {
	case "upstream":
		telemetry.InjectTraceparent(ctx, out)
	case "policy":
		s := &stepSpan{o: o, phase: phase, policy: true, start: time.Now(), ctx: ctx}
		return ctx, s.done
	}
	return ctx, noStep
}

func noStep(string) {}

// stepSpan is one step's span and what its end records: one allocation for the step's
// state instead of one per variable its closure would capture.
type stepSpan struct {
	o      *OTel
	span   trace.Span
	ctx    context.Context // the policy step's, for its metric
	phase  string
	start  time.Time
	policy bool
}

func (s *stepSpan) done(errClass string) {
	if s.policy {
		s.o.T.Metrics().PolicyEval(s.ctx, s.phase, time.Since(s.start), errClass != "")
	}
	if s.span != nil {
		telemetry.EndSpan(s.span, errClass)
	}
}

func (o *OTel) Held(ctx context.Context) func(event.ApprovalState, bool, time.Duration) {
	o.T.Metrics().ApprovalStarted(ctx)
	return func(state event.ApprovalState, failed bool, waited time.Duration) {
		o.T.Metrics().ApprovalDone(ctx, state, failed, waited)
	}
}

// traceIDs are the span context's trace and span ids in hex, as TraceID.String and
// SpanID.String give them, with one allocation each instead of two: they are formatted
// for both of a request's audit records.
func traceIDs(sc trace.SpanContext) (traceID, spanID string) {
	var buf [48]byte
	t, s := sc.TraceID(), sc.SpanID()
	hex.Encode(buf[:32], t[:])
	hex.Encode(buf[32:], s[:])
	return string(buf[:32]), string(buf[32:])
}

func facts(ev *audit.Event) telemetry.RequestFacts {
	return telemetry.RequestFacts{
		Kind: ev.Kind, SandboxID: ev.SandboxID, ExecID: ev.ExecID, Method: ev.Method, Scheme: ev.Scheme, Host: ev.Host,
		Port: ev.Port, Path: ev.Path, Phase: ev.Phase, Decision: ev.Decision, Rule: ev.Rule,
		Reason: ev.Reason, PolicyRev: ev.PolicyRev, Creds: ev.Creds, ApprovalID: ev.ApprovalID,
		Approver: ev.Approver, Status: ev.Status, BytesIn: ev.BytesIn, BytesOut: ev.BytesOut, Redactions: ev.Redactions,
		Duration: time.Duration(ev.DurationMS * float64(time.Millisecond)), ErrorClass: ev.ErrorClass,
	}
}
