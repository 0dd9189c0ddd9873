package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestLoggerAddsTraceIDs(t *testing.T) {
	_, tracer := recorder(t)
	var buf bytes.Buffer
	log := NewLogger(&buf, slog.LevelInfo).With("component", "proxy")
	ctx, span := tracer.Start(context.Background(), "x")
	log.InfoContext(ctx, "with span")
	log.Info("without span")
	log.DebugContext(ctx, "below level")
	span.End()

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), buf.String())
	}
	var first, second map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &second); err != nil {
		t.Fatal(err)
	}
	if first["trace_id"] != span.SpanContext().TraceID().String() || first["span_id"] != span.SpanContext().SpanID().String() {
		t.Errorf("got trace_id %v span_id %v, want the span's", first["trace_id"], first["span_id"])
	}
	if first["component"] != "proxy" {
		t.Errorf("got component %v, want proxy", first["component"])
	}
	if _, ok := second["trace_id"]; ok {
		t.Errorf("record without a span has a trace_id: %s", lines[1])
	}
}

const canary = "CANARY-3e9c51d0"

// Spans, metric labels and logs made for requests that carry a secret in headers, query,
// user info and tracestate never contain it.
func TestNoCanaryInSpansMetricsOrLogs(t *testing.T) {
	clearOTELEnv(t)
	tel, err := Setup(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	rec, tracer := recorder(t)
	var logs bytes.Buffer
	log := NewLogger(&logs, slog.LevelDebug)

	for _, target := range []string{
		"https://api.example.com/v1?token=" + canary,
		"https://api.example.com/v1?" + canary,
		"https://u:" + canary + "@api.example.com/v1",
	} {
		r := httptest.NewRequest("POST", target, strings.NewReader(canary))
		r.Header.Set("Authorization", "Bearer "+canary)
		r.Header.Set("X-Api-Key", canary)
		r.Header.Set("Cookie", "s="+canary)
		r.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		r.Header.Set("tracestate", "k="+canary)
		ctx, span := StartRequestSpan(context.Background(), tracer, r, false)
		f := RequestFacts{SandboxID: "sbx-1", Method: r.Method, Host: "api.example.com", Port: 443, Path: r.URL.EscapedPath(),
			Decision: "deny", Rule: "default", Status: 403, Creds: []string{"github-write"}}
		EndRequestSpan(span, f)
		tel.Metrics().RequestDone(ctx, f)
		log.InfoContext(ctx, "request done", "request", f)
	}

	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.String(), canary) {
				t.Errorf("span %s attribute %s carries the canary", s.Name(), kv.Key)
			}
		}
		for _, l := range s.Links() {
			if strings.Contains(l.SpanContext.TraceState().String(), canary) {
				t.Errorf("span %s link tracestate carries the canary", s.Name())
			}
		}
	}
	rr := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rr, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rr.Body.String(), "airlock_requests_total") {
		t.Fatal("/metrics has no airlock_requests_total")
	}
	if strings.Contains(rr.Body.String(), canary) {
		t.Error("/metrics carries the canary")
	}
	if !strings.Contains(logs.String(), `"decision":"deny"`) {
		t.Fatalf("log lacks the request facts:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), canary) {
		t.Errorf("log carries the canary:\n%s", logs.String())
	}
}
