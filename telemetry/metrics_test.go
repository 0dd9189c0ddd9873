package telemetry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/internal/event"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func manualMetrics(t *testing.T) (*Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	rd := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rd))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := NewMetrics(mp.Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	return m, rd
}

// points flattens collected sums, gauges and histograms: "name{k=v,...}" -> value (count for histograms).
func points(t *testing.T, rd *sdkmetric.ManualReader) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rd.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	key := func(name string, set attribute.Set) string {
		var parts []string
		for _, kv := range set.ToSlice() {
			parts = append(parts, string(kv.Key)+"="+kv.Value.String())
		}
		return name + "{" + strings.Join(parts, ",") + "}"
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[key(m.Name, p.Attributes)] = float64(p.Count)
				}
			default:
				t.Fatalf("unexpected data %T for %s", d, m.Name)
			}
		}
	}
	return out
}

func TestMetricsAttributes(t *testing.T) {
	m, rd := manualMetrics(t)
	ctx := context.Background()
	facts := []RequestFacts{
		{Decision: "allow", Rule: "github.read", Phase: "request", Host: "api.github.com", Duration: 20 * time.Millisecond},
		{Decision: "allow", Rule: "github.read", Phase: "request", Host: "api.github.com", Duration: 30 * time.Millisecond, Redactions: 3},
		{Decision: "deny", Rule: "default", Phase: "connect", Host: "evil.example"},
		{Decision: "approve", Rule: "github.write", Phase: "request", Host: "api.github.com"},
		{Decision: "error", Rule: "github.write", Phase: "request", Host: "api.github.com", ErrorClass: "vault_unreachable"},
		{Decision: "", Rule: "", Phase: "request", Host: "nowhere.example"},
		{Decision: "bogus", Rule: "r", Phase: "request"},
	}
	for _, f := range facts {
		m.RequestDone(ctx, f)
	}
	m.PolicyEval(ctx, "request", time.Millisecond, false)
	m.PolicyEval(ctx, "request", time.Millisecond, true)
	m.ApprovalStarted(ctx)
	m.ApprovalStarted(ctx)
	m.ApprovalDone(ctx, event.ApprovalApproved, false, 3*time.Second)
	m.VaultFetch(ctx, "github-write", "miss")
	m.VaultFetch(ctx, "github-write", "hit")
	m.VaultFetch(ctx, "github-write", "hit")
	m.VaultFetch(ctx, "db", "error")
	m.SandboxStarted(ctx)
	m.ConnOpened(ctx)
	m.ConnOpened(ctx)
	m.ConnClosed(ctx)
	m.AuditError(ctx)

	got := points(t, rd)
	want := map[string]float64{
		"airlock.requests{decision=allow,phase=request,rule=github.read}":    2,
		"airlock.requests{decision=deny,phase=connect,rule=default}":         1,
		"airlock.requests{decision=approve,phase=request,rule=github.write}": 1,
		"airlock.requests{decision=error,phase=request,rule=github.write}":   1,
		"airlock.requests{decision=deny,phase=request,rule=}":                1,
		"airlock.requests{decision=other,phase=request,rule=r}":              1,
		"airlock.requests.denied{rule=default,server.address=evil.example}":  1,
		"airlock.requests.denied{rule=,server.address=nowhere.example}":      1,
		"airlock.request.duration{decision=allow,phase=request}":             2,
		"airlock.policy.eval.duration{outcome=ok,phase=request}":             1,
		"airlock.policy.eval.duration{outcome=error,phase=request}":          1,
		"airlock.approvals.pending{}":                                        1,
		"airlock.approval.wait.duration{outcome=approved}":                   1,
		"airlock.vault.fetches{credential=github-write,result=hit}":          2,
		"airlock.vault.fetches{credential=github-write,result=miss}":         1,
		"airlock.vault.fetches{credential=db,result=error}":                  1,
		"airlock.sandboxes.active{}":                                         1,
		"airlock.connections.active{}":                                       1,
		"airlock.audit.errors{}":                                             1,
		"airlock.redactions{rule=github.read}":                               3,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %v, want %v", k, got[k], v)
		}
	}
}

func TestDeniedHostLabelsAreBounded(t *testing.T) {
	m, rd := manualMetrics(t)
	// Many sandboxes, each within its share, fill the labels; later hosts are "other".
	perSandbox := MaxHostLabelsPerSandbox / 2
	for i := range MaxHostLabels + 50 {
		m.RequestDone(context.Background(), RequestFacts{SandboxID: fmt.Sprintf("sbx-%d", i/perSandbox), Decision: "deny", Rule: "default", Host: fmt.Sprintf("h%d.example", i)})
	}
	got := points(t, rd)
	if n := deniedSeries(got, ""); n != MaxHostLabels+1 {
		t.Errorf("got %d denied series, want %d (the cap plus other)", n, MaxHostLabels+1)
	}
	if got["airlock.requests.denied{rule=default,server.address=other}"] != 50 {
		t.Errorf("got %v in other, want 50", got["airlock.requests.denied{rule=default,server.address=other}"])
	}
}

// deniedSeries counts the airlock.requests.denied series whose labels contain filter.
func deniedSeries(got map[string]float64, filter string) int {
	n := 0
	for k := range got {
		if strings.HasPrefix(k, MetricRequestsDenied+"{") && strings.Contains(k, filter) {
			n++
		}
	}
	return n
}

// TestDeniedHostLabelsPerSandbox: one sandbox cycling through a thousand random names
// gets its share of labels and no more; another sandbox's real denied host still gets its
// own label afterwards, and a host that has a label keeps it for everyone.
func TestDeniedHostLabelsPerSandbox(t *testing.T) {
	m, rd := manualMetrics(t)
	ctx := context.Background()
	var b [8]byte
	for range 1000 {
		_, _ = rand.Read(b[:])
		m.RequestDone(ctx, RequestFacts{SandboxID: "sbx-evil", Decision: "deny", Rule: "default", Host: hex.EncodeToString(b[:]) + ".example"})
	}
	m.RequestDone(ctx, RequestFacts{SandboxID: "sbx-good", Decision: "deny", Rule: "default", Host: "real.example"})
	// The probing sandbox reaches a host that has a label: it is counted under that label.
	m.RequestDone(ctx, RequestFacts{SandboxID: "sbx-evil", Decision: "would_deny", Rule: "default", Host: "real.example"})
	got := points(t, rd)
	if n := deniedSeries(got, ".example"); n != MaxHostLabelsPerSandbox+1 {
		t.Errorf("got %d host series, want the probing sandbox's share %d plus real.example", n, MaxHostLabelsPerSandbox)
	}
	if v := got["airlock.requests.denied{rule=default,server.address=real.example}"]; v != 2 {
		t.Errorf("real.example counted %v, want 2 under its own label", v)
	}
	if v := got["airlock.requests.denied{rule=default,server.address=other}"]; v != 1000-MaxHostLabelsPerSandbox {
		t.Errorf("other counted %v, want %d", v, 1000-MaxHostLabelsPerSandbox)
	}
}

func TestNilMetricsIsSafe(t *testing.T) {
	var m *Metrics
	m.RequestDone(context.Background(), RequestFacts{Decision: "allow"})
	m.ApprovalStarted(context.Background())
	m.VaultFetch(context.Background(), "x", "hit")
}

func TestPrometheusHandler(t *testing.T) {
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		t.Setenv(k, "")
	}
	tel, err := Setup(context.Background(), Options{Version: "1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	if len(tel.Exported()) != 0 {
		t.Errorf("got exported %v with no OTEL_* set, want none", tel.Exported())
	}
	ctx := context.Background()
	tel.Metrics().RequestDone(ctx, RequestFacts{Decision: "deny", Rule: "default", Phase: "request", Host: "evil.example", Duration: time.Millisecond})
	tel.Metrics().VaultFetch(ctx, "github-write", "error")
	tel.Metrics().ApprovalStarted(ctx)
	tel.Metrics().PolicyEval(ctx, "request", time.Millisecond, false)
	tel.Metrics().ApprovalDone(ctx, event.ApprovalExpired, false, time.Minute)
	tel.Metrics().SandboxStarted(ctx)
	tel.Metrics().ConnOpened(ctx)

	rr := httptest.NewRecorder()
	tel.MetricsHandler().ServeHTTP(rr, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rr.Body)
	for _, want := range []string{
		`airlock_requests_total{decision="deny",phase="request",rule="default"} 1`,
		`airlock_requests_denied_total{rule="default",server_address="evil.example"} 1`,
		`airlock_request_duration_seconds_bucket{decision="deny",phase="request",le="0.001"} 1`,
		`airlock_policy_eval_duration_seconds_count{outcome="ok",phase="request"} 1`,
		`airlock_approvals_pending 0`,
		`airlock_approval_wait_duration_seconds_count{outcome="expired"} 1`,
		`airlock_vault_fetches_total{credential="github-write",result="error"} 1`,
		`airlock_sandboxes_active 1`,
		`airlock_connections_active 1`,
		`service_name="airlock"`,
		`service_version="1.2.3"`,
		`go_goroutines`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}
}
