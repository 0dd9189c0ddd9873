package proxy

import (
	"context"
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
		sc := span.SpanContext()
		ev.TraceID, ev.SpanID = sc.TraceID().String(), sc.SpanID().String()
		f := facts(ev)
		telemetry.EndRequestSpan(span, f)
		o.T.Metrics().RequestDone(ctx, f)
	}
}

func (o *OTel) Step(ctx context.Context, step, phase string, out *http.Request) (context.Context, func(string)) {
	var span trace.Span
	switch step {
	case "policy":
		start := time.Now()
		ctx, span = telemetry.StartPolicySpan(ctx, o.T.Tracer(), phase)
		return ctx, func(errClass string) {
			o.T.Metrics().PolicyEval(ctx, phase, time.Since(start), errClass != "")
			telemetry.EndSpan(span, errClass)
		}
	case "upstream":
		ctx, span = telemetry.StartUpstreamSpan(ctx, o.T.Tracer(), out)
	case "approval":
		ctx, span = telemetry.StartApprovalSpan(ctx, o.T.Tracer(), "")
	default:
		ctx, span = o.T.Tracer().Start(ctx, "airlock."+step)
	}
	return ctx, func(errClass string) { telemetry.EndSpan(span, errClass) }
}

func (o *OTel) Held(ctx context.Context) func(event.ApprovalState, bool, time.Duration) {
	o.T.Metrics().ApprovalStarted(ctx)
	return func(state event.ApprovalState, failed bool, waited time.Duration) {
		o.T.Metrics().ApprovalDone(ctx, state, failed, waited)
	}
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
