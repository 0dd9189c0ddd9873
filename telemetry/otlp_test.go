package telemetry

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// otlpHTTPReceiver is a minimal OTLP/HTTP endpoint: it decodes the protobuf export requests
// with the OTLP collector types and hands them to the test.
type otlpHTTPReceiver struct {
	traces  chan *coltracepb.ExportTraceServiceRequest
	metrics chan *colmetricpb.ExportMetricsServiceRequest
}

func (rcv *otlpHTTPReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	switch r.URL.Path {
	case "/v1/traces":
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rcv.traces <- &req
		writeProto(w, &coltracepb.ExportTraceServiceResponse{})
	case "/v1/metrics":
		var req colmetricpb.ExportMetricsServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rcv.metrics <- &req
		writeProto(w, &colmetricpb.ExportMetricsServiceResponse{})
	default:
		http.NotFound(w, r)
	}
}

func writeProto(w http.ResponseWriter, m proto.Message) {
	b, _ := proto.Marshal(m)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

// grpcTraceReceiver is the same over OTLP/gRPC.
type grpcTraceReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	traces chan *coltracepb.ExportTraceServiceRequest
}

func (g *grpcTraceReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.traces <- req
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func clearOTELEnv(t *testing.T) {
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
		"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"} {
		t.Setenv(k, "")
	}
}

// sendOneRequestSpan makes a denied-request span and a metric, then shuts down (which flushes).
func sendOneRequestSpan(t *testing.T) {
	t.Helper()
	tel, err := Setup(context.Background(), Options{Version: "0.0.1-test"})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "https://api.github.com/repos/acme/app/issues", nil)
	ctx, span := StartRequestSpan(context.Background(), tel.Tracer(), r, false)
	_, p := StartPolicySpan(ctx, tel.Tracer(), "request")
	EndSpan(p, "")
	f := RequestFacts{SandboxID: "sbx-otlp", Decision: "deny", Rule: "github.write", Phase: "request", Status: 403, Creds: []string{"github-write"}}
	EndRequestSpan(span, f)
	tel.Metrics().RequestDone(ctx, f)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func receive[T any](t *testing.T, ch chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatal("nothing received from the exporter")
		panic("unreachable")
	}
}

func checkExportedSpans(t *testing.T, req *coltracepb.ExportTraceServiceRequest) {
	t.Helper()
	var server *tracepb.Span
	var names []string
	var resAttrs map[string]string
	for _, rs := range req.ResourceSpans {
		resAttrs = kvMap(rs.Resource.Attributes)
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				names = append(names, s.Name)
				if s.Kind == tracepb.Span_SPAN_KIND_SERVER {
					server = s
				}
			}
		}
	}
	if server == nil {
		t.Fatalf("no server span among %v", names)
	}
	if len(names) != 2 {
		t.Errorf("got spans %v, want the request and policy spans", names)
	}
	got := kvMap(server.Attributes)
	for k, v := range map[string]string{"http.request.method": "POST", "server.address": "api.github.com", "server.port": "443",
		"url.path": "/repos/acme/app/issues", "http.response.status_code": "403", AttrSandboxID: "sbx-otlp",
		AttrDecision: "deny", AttrRule: "github.write", AttrCredentials: "github-write"} {
		if got[k] != v {
			t.Errorf("exported span attribute %s: got %q, want %q", k, got[k], v)
		}
	}
	if resAttrs["service.name"] != "airlock" || resAttrs["service.version"] != "0.0.1-test" {
		t.Errorf("got resource %v, want service airlock 0.0.1-test", resAttrs)
	}
}

func kvMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		switch v := kv.Value.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = itoa(v.IntValue)
		case *commonpb.AnyValue_ArrayValue:
			for i, e := range v.ArrayValue.Values {
				if i > 0 {
					m[kv.Key] += ","
				}
				m[kv.Key] += e.GetStringValue()
			}
		}
	}
	return m
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

func TestOTLPHTTPExport(t *testing.T) {
	clearOTELEnv(t)
	rcv := &otlpHTTPReceiver{traces: make(chan *coltracepb.ExportTraceServiceRequest, 10),
		metrics: make(chan *colmetricpb.ExportMetricsServiceRequest, 10)}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")

	sendOneRequestSpan(t)
	checkExportedSpans(t, receive(t, rcv.traces))

	mreq := receive(t, rcv.metrics)
	found := false
	for _, rm := range mreq.ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name == MetricRequests {
					dp := m.GetSum().GetDataPoints()
					found = len(dp) == 1 && dp[0].GetAsInt() == 1 && kvMap(dp[0].Attributes)["decision"] == "deny"
				}
			}
		}
	}
	if !found {
		t.Errorf("no %s sum with one deny in the exported metrics", MetricRequests)
	}
}

func TestOTLPGRPCExport(t *testing.T) {
	clearOTELEnv(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rcv := &grpcTraceReceiver{traces: make(chan *coltracepb.ExportTraceServiceRequest, 10)}
	coltracepb.RegisterTraceServiceServer(gs, rcv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://"+lis.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_METRICS_EXPORTER", "none")

	sendOneRequestSpan(t)
	checkExportedSpans(t, receive(t, rcv.traces))
}

func TestSetupRejectsBadEnv(t *testing.T) {
	tests := []struct{ key, val string }{
		{"OTEL_TRACES_EXPORTER", "zipkin"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"},
		{"OTEL_METRICS_EXPORTER", "carrier-pigeon"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			clearOTELEnv(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			t.Setenv(tt.key, tt.val)
			tel, err := Setup(context.Background(), Options{})
			if err == nil {
				_ = tel.Shutdown(context.Background())
				t.Fatalf("got nil error for %s=%s", tt.key, tt.val)
			}
		})
	}
}

func TestSDKDisabledExportsNothing(t *testing.T) {
	clearOTELEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_SDK_DISABLED", "true")
	tel, err := Setup(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	if len(tel.Exported()) != 0 {
		t.Errorf("got exported %v, want none", tel.Exported())
	}
}
