package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func recorder(t *testing.T) (*tracetest.SpanRecorder, trace.Tracer) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp.Tracer("test")
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

func TestRequestSpanAttributes(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		target     string
		facts      RequestFacts
		want       map[string]string
		wantStatus codes.Code
	}{
		{"allowed", "GET", "https://api.github.com/repos/acme/app?token=x",
			RequestFacts{SandboxID: "sbx-1", Decision: "allow", Rule: "github.read", Phase: "request", Status: 200, Creds: []string{"github-read"}},
			map[string]string{"http.request.method": "GET", "server.address": "api.github.com", "server.port": "443",
				"url.path": "/repos/acme/app", "url.scheme": "https", "http.response.status_code": "200",
				AttrSandboxID: "sbx-1", AttrDecision: "allow", AttrRule: "github.read", AttrCredentials: `["github-read"]`},
			codes.Unset},
		{"denied", "POST", "http://evil.example:8080/upload",
			RequestFacts{SandboxID: "sbx-1", Decision: "deny", Rule: "default", Reason: "not allowed", Status: 403},
			map[string]string{"http.request.method": "POST", "server.address": "evil.example", "server.port": "8080",
				"url.path": "/upload", "http.response.status_code": "403", AttrDecision: "deny", AttrRule: "default", AttrReason: "not allowed"},
			codes.Unset},
		{"approved", "POST", "https://api.github.com/repos/acme/app/issues",
			RequestFacts{SandboxID: "sbx-2", Decision: "approve", Rule: "github.write", ApprovalID: "apr-9", Approver: "oncall", Status: 201, Creds: []string{"github-write"}},
			map[string]string{AttrDecision: "approve", AttrApprovalID: "apr-9", AttrApprover: "oncall", "http.response.status_code": "201", AttrCredentials: `["github-write"]`},
			codes.Unset},
		{"failed", "GET", "https://vault-backed.example/x",
			RequestFacts{SandboxID: "sbx-3", Decision: "error", ErrorClass: "vault_unreachable", Status: 503},
			map[string]string{AttrDecision: "error", "error.type": "vault_unreachable", "http.response.status_code": "503"},
			codes.Error},
		{"connect", "CONNECT", "http://placeholder/",
			RequestFacts{SandboxID: "sbx-1", Decision: "allow", Phase: "connect"},
			map[string]string{"http.request.method": "CONNECT", "server.address": "git.example", "server.port": "443", AttrPhase: "connect"},
			codes.Unset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, tracer := recorder(t)
			r := httptest.NewRequest(tt.method, tt.target, nil)
			if tt.method == http.MethodConnect {
				r.URL.Host, r.Host, r.URL.Scheme, r.URL.Path = "", "git.example:443", "", ""
			}
			_, span := StartRequestSpan(context.Background(), tracer, r, false)
			EndRequestSpan(span, tt.facts)
			spans := rec.Ended()
			if len(spans) != 1 {
				t.Fatalf("got %d spans, want 1", len(spans))
			}
			s := spans[0]
			if s.SpanKind() != trace.SpanKindServer || s.Name() != tt.method {
				t.Errorf("got kind %v name %q, want server %q", s.SpanKind(), s.Name(), tt.method)
			}
			got := attrMap(s.Attributes())
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("attribute %s: got %q, want %q", k, got[k], v)
				}
			}
			if _, ok := got["url.query"]; ok {
				t.Error("span carries url.query")
			}
			if tt.method == http.MethodConnect {
				if _, ok := got["url.path"]; ok {
					t.Error("CONNECT span carries url.path")
				}
			}
			if s.Status().Code != tt.wantStatus {
				t.Errorf("got status %v, want %v", s.Status().Code, tt.wantStatus)
			}
		})
	}
}

func TestSandboxTraceparentIsALinkUnlessTrusted(t *testing.T) {
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, trust := range []bool{false, true} {
		rec, tracer := recorder(t)
		r := httptest.NewRequest("GET", "http://example.com/", nil)
		r.Header.Set("traceparent", parent)
		_, span := StartRequestSpan(context.Background(), tracer, r, trust)
		span.End()
		s := rec.Ended()[0]
		gotTrace := s.SpanContext().TraceID().String()
		if trust {
			if gotTrace != "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent().SpanID().String() != "00f067aa0ba902b7" {
				t.Errorf("trusted: got trace %s parent %s, want the sandbox's", gotTrace, s.Parent().SpanID())
			}
			continue
		}
		if gotTrace == "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent().IsValid() {
			t.Errorf("untrusted: span joined the sandbox's trace (trace %s, parent %v)", gotTrace, s.Parent())
		}
		if len(s.Links()) != 1 || s.Links()[0].SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("untrusted: got links %v, want one to the sandbox's span", s.Links())
		}
	}
}

func TestChildSpansAndUpstreamInjection(t *testing.T) {
	rec, tracer := recorder(t)
	ctx, root := StartRequestSpan(context.Background(), tracer, httptest.NewRequest("POST", "https://api.example.com/x", nil), false)
	_, p := StartPolicySpan(ctx, tracer, "request")
	EndSpan(p, "")
	_, a := StartApprovalSpan(ctx, tracer, "apr-1")
	EndSpan(a, "approval_expired")
	_, c := StartCredentialSpan(ctx, tracer, "github-write")
	EndSpan(c, "")
	out, _ := http.NewRequest("POST", "https://api.example.com/x", nil)
	out.Header.Set("traceparent", "00-11111111111111111111111111111111-2222222222222222-01")
	uctx, u := StartUpstreamSpan(ctx, tracer, out)
	UpstreamAnswered(uctx, 404)
	EndSpan(u, "")
	root.End()

	byName := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = s
		if s.SpanContext().SpanID() == root.SpanContext().SpanID() {
			continue
		}
		if s.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Errorf("%s: parent %s, want the request span", s.Name(), s.Parent().SpanID())
		}
	}
	for _, n := range []string{"airlock.policy.eval", "airlock.approval.wait", "airlock.credential.fetch"} {
		if byName[n] == nil {
			t.Errorf("no %s span", n)
		}
	}
	if got := byName["airlock.approval.wait"].Status().Code; got != codes.Error {
		t.Errorf("approval span status: got %v, want Error", got)
	}
	if got := attrMap(byName["airlock.credential.fetch"].Attributes())[AttrCredential]; got != "github-write" {
		t.Errorf("credential attribute: got %q", got)
	}
	var client sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindClient {
			client = s
		}
	}
	if client == nil || attrMap(client.Attributes())["http.response.status_code"] != "404" {
		t.Errorf("upstream client span %v: want one with http.response.status_code 404", client)
	}
	tp := out.Header.Get("traceparent")
	want := "00-" + root.SpanContext().TraceID().String() + "-"
	if len(tp) < len(want) || tp[:len(want)] != want {
		t.Errorf("upstream traceparent %q, want our trace %s", tp, root.SpanContext().TraceID())
	}
}
