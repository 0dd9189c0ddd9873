package telemetry

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-proxy/airlock/internal/event"
)

// Span attribute keys beyond the HTTP semantic conventions.
const (
	AttrSandboxID   = "airlock.sandbox.id"
	AttrDecision    = "airlock.decision"
	AttrRule        = "airlock.rule"
	AttrReason      = "airlock.reason"
	AttrPhase       = "airlock.phase"
	AttrPolicyRev   = "airlock.policy.revision"
	AttrCredentials = "airlock.credentials"
	AttrCredential  = "airlock.credential"
	AttrApprovalID  = "airlock.approval.id"
	AttrApprover    = "airlock.approver"
	AttrExecID      = "airlock.exec.id"
)

// The span kinds as options, made once (each call of trace.WithSpanKind allocates).
var (
	serverKind = trace.WithSpanKind(trace.SpanKindServer)
	clientKind = trace.WithSpanKind(trace.SpanKindClient)
)

var knownMethods = map[string]bool{"GET": true, "HEAD": true, "POST": true, "PUT": true, "DELETE": true,
	"CONNECT": true, "OPTIONS": true, "TRACE": true, "PATCH": true}

func methodAttr(m string) string {
	if knownMethods[m] {
		return m
	}
	return "_OTHER"
}

// Attributes are set once a span is known to be recorded: a span that is not (spans are
// not exported, so the sampler drops them all) still gets its ids, which audit events and
// logs carry, without building attributes nobody reads. No sampler airlock can be
// configured with (OTEL_TRACES_SAMPLER) looks at attributes.

// StartRequestSpan starts the server span for a request from a sandbox, named by its
// method, with the HTTP semantic-convention attributes http.request.method, server.address,
// server.port, url.scheme and url.path (never the query or headers). A W3C traceparent
// sent by the sandbox becomes the parent only when trustParent is true; otherwise the span
// starts a new trace and links to it, so a sandbox cannot graft itself into our traces.
func StartRequestSpan(ctx context.Context, tracer trace.Tracer, r *http.Request, trustParent bool) (context.Context, trace.Span) {
	opts := newRootOpts
	if _, sent := r.Header["Traceparent"]; sent {
		ctx, opts = sandboxParent(ctx, r, trustParent)
	}
	ctx, span := tracer.Start(ctx, methodAttr(r.Method), opts...)
	if span.IsRecording() {
		span.SetAttributes(requestStartAttrs(r)...)
	}
	return ctx, span
}

// newRootOpts start a request's span in a trace of its own (shared, read only).
var newRootOpts = []trace.SpanStartOption{serverKind, trace.WithNewRoot()}

// sandboxParent is what a traceparent the sandbox sent makes of the request span: its
// parent when trusted, else a link from a new root. Out of line: the request span's start
// is the deepest point of every request's stack, and this frame would be under it.
//
//go:noinline
func sandboxParent(ctx context.Context, r *http.Request, trust bool) (context.Context, []trace.SpanStartOption) {
	remote := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(r.Header)))
	switch {
	case trust && remote.IsValid():
		return trace.ContextWithRemoteSpanContext(ctx, remote), []trace.SpanStartOption{serverKind}
	case remote.IsValid():
		// The sandbox's tracestate is its own free text: not kept on the link.
		remote = remote.WithTraceState(trace.TraceState{})
		return ctx, []trace.SpanStartOption{serverKind, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: remote,
			Attributes: []attribute.KeyValue{attribute.String("airlock.link", "sandbox.traceparent")}})}
	default:
		return ctx, newRootOpts
	}
}

func requestStartAttrs(r *http.Request) []attribute.KeyValue {
	scheme, hostport := "", r.Host
	if r.URL != nil {
		scheme = strings.ToLower(r.URL.Scheme)
		if r.URL.Host != "" {
			hostport = r.URL.Host
		}
	}
	host, port := hostport, 0
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host = h
		port, _ = strconv.Atoi(p)
	}
	if port == 0 {
		switch {
		case r.Method == http.MethodConnect || scheme == "https":
			port = 443
		case scheme == "http":
			port = 80
		}
	}
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", methodAttr(r.Method)),
		attribute.String("server.address", strings.ToLower(strings.Trim(host, "[]"))),
	}
	if port > 0 {
		attrs = append(attrs, attribute.Int("server.port", port))
	}
	if r.Method != http.MethodConnect && r.URL != nil {
		attrs = append(attrs, attribute.String("url.path", r.URL.EscapedPath()))
		if scheme != "" {
			attrs = append(attrs, attribute.String("url.scheme", scheme))
		}
	}
	if r.ProtoMajor > 0 {
		attrs = append(attrs, attribute.String("network.protocol.version", strconv.Itoa(r.ProtoMajor)+"."+strconv.Itoa(r.ProtoMinor)))
	}
	return attrs
}

// RequestAttributes are the span attributes for the outcome of a request.
func RequestAttributes(f RequestFacts) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		attribute.String(AttrSandboxID, f.SandboxID),
		attribute.String(AttrDecision, decisionLabel(f.Decision)),
	}
	add := func(k, v string) {
		if v != "" {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	add(AttrExecID, f.ExecID)
	add(AttrRule, f.Rule)
	add(AttrReason, f.Reason)
	add(AttrPhase, f.Phase)
	add(AttrPolicyRev, f.PolicyRev)
	add(AttrApprovalID, f.ApprovalID)
	add(AttrApprover, f.Approver)
	add("error.type", f.ErrorClass)
	if len(f.Creds) > 0 {
		attrs = append(attrs, attribute.StringSlice(AttrCredentials, f.Creds))
	}
	if f.Status > 0 {
		attrs = append(attrs, attribute.Int("http.response.status_code", f.Status))
	}
	if f.BytesIn > 0 {
		attrs = append(attrs, attribute.Int64("http.request.body.size", f.BytesIn))
	}
	if f.BytesOut > 0 {
		attrs = append(attrs, attribute.Int64("http.response.body.size", f.BytesOut))
	}
	return attrs
}

// EndRequestSpan sets the outcome attributes and ends the span. The status is Error for
// decision error, an error class, or a 5xx; a deny is a normal outcome.
func EndRequestSpan(span trace.Span, f RequestFacts) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(RequestAttributes(f)...)
	if f.Decision == event.DecisionError || f.ErrorClass != "" || f.Status >= 500 {
		desc := f.ErrorClass
		if desc == "" {
			desc = "request failed"
		}
		span.SetStatus(codes.Error, desc)
	}
	span.End()
}

// StartPolicySpan starts the child span of a policy evaluation.
func StartPolicySpan(ctx context.Context, tracer trace.Tracer, phase string) (context.Context, trace.Span) {
	ctx, span := tracer.Start(ctx, "airlock.policy.eval")
	if span.IsRecording() {
		span.SetAttributes(attribute.String(AttrPhase, phase))
	}
	return ctx, span
}

// StartApprovalSpan starts the child span of an approval wait.
func StartApprovalSpan(ctx context.Context, tracer trace.Tracer, approvalID string) (context.Context, trace.Span) {
	return tracer.Start(ctx, "airlock.approval.wait", trace.WithAttributes(attribute.String(AttrApprovalID, approvalID)))
}

// StartCredentialSpan starts the child span of a credential fetch (name only).
func StartCredentialSpan(ctx context.Context, tracer trace.Tracer, credential string) (context.Context, trace.Span) {
	return tracer.Start(ctx, "airlock.credential.fetch", clientKind,
		trace.WithAttributes(attribute.String(AttrCredential, credential)))
}

// StartUpstreamSpan starts the client span of the upstream call and injects its
// traceparent into out's headers (replacing any the sandbox sent).
func StartUpstreamSpan(ctx context.Context, tracer trace.Tracer, out *http.Request) (context.Context, trace.Span) {
	ctx, span := tracer.Start(ctx, methodAttr(out.Method), clientKind)
	if span.IsRecording() {
		span.SetAttributes(requestStartAttrs(out)...)
	}
	InjectTraceparent(ctx, out)
	return ctx, span
}

// InjectTraceparent replaces any traceparent and tracestate in out's headers with the
// span context in ctx: what StartUpstreamSpan injects, for a caller that starts no span
// of its own because the one in ctx records nothing.
func InjectTraceparent(ctx context.Context, out *http.Request) {
	out.Header.Del("traceparent")
	out.Header.Del("tracestate")
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(out.Header))
}

// UpstreamAnswered records the upstream's status code on the client span StartUpstreamSpan
// put in ctx.
func UpstreamAnswered(ctx context.Context, status int) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.Int("http.response.status_code", status))
	}
}

// StartSandboxSpan starts the span of a sandbox run; labels become airlock.sandbox.label.K.
func StartSandboxSpan(ctx context.Context, tracer trace.Tracer, id string, labels map[string]string) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{attribute.String(AttrSandboxID, id)}
	for k, v := range labels {
		attrs = append(attrs, attribute.String("airlock.sandbox.label."+k, v))
	}
	return tracer.Start(ctx, "airlock.sandbox.run", trace.WithAttributes(attrs...))
}

// EndSpan ends a child span; a non-empty errorClass (a short class, never an error text,
// which may quote a secret) marks it failed and sets error.type.
func EndSpan(span trace.Span, errorClass string) {
	if errorClass != "" {
		span.SetAttributes(attribute.String("error.type", errorClass))
		span.SetStatus(codes.Error, errorClass)
	}
	span.End()
}
