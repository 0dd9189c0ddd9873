package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/rego"
)

func TestHistogramQuantiles(t *testing.T) {
	var h Histogram
	// 1..10000 µs, once each.
	for i := 1; i <= 10000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{0.50, 5000 * time.Microsecond},
		{0.90, 9000 * time.Microsecond},
		{0.99, 9900 * time.Microsecond},
		{1.00, 10000 * time.Microsecond},
	} {
		got := h.Quantile(tc.q)
		if rel := float64(got-tc.want) / float64(tc.want); rel < -0.035 || rel > 0.035 {
			t.Errorf("Quantile(%v) = %v, want %v within 3.5%%", tc.q, got, tc.want)
		}
	}
	if h.Count() != 10000 || h.Max() != 10*time.Millisecond {
		t.Errorf("Count, Max = %d, %v; want 10000, 10ms", h.Count(), h.Max())
	}
}

func TestHistogramSmallAndMerge(t *testing.T) {
	var a, b Histogram
	for _, v := range []time.Duration{3, 3, 3, 40} {
		a.Record(v)
	}
	b.Record(time.Hour)
	a.Merge(&b)
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.2, 3}, {0.6, 3}, {0.8, 40}, {1, time.Hour}} {
		got := a.Quantile(tc.q)
		if rel := float64(got-tc.want) / float64(tc.want); rel < -0.035 || rel > 0.035 {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	var empty Histogram
	if got := empty.Quantile(0.5); got != 0 {
		t.Errorf("empty Quantile = %v, want 0", got)
	}
}

func TestBucketsCoverAllValues(t *testing.T) {
	prev := -1
	for _, v := range []uint64{0, 1, 63, 64, 65, 127, 128, 1 << 20, 1<<40 + 12345, 1<<63 - 1, 1<<64 - 1} {
		i := bucketOf(v)
		if i < 0 || i >= numBuckets || i < prev {
			t.Fatalf("bucketOf(%d) = %d: outside [0,%d) or not monotonic (previous %d)", v, i, numBuckets, prev)
		}
		if mid := bucketMid(i); v >= 64 && (float64(mid) < float64(v)*0.96 || float64(mid) > float64(v)*1.04) {
			t.Errorf("bucketMid(bucketOf(%d)) = %d, want within 4%%", v, mid)
		}
		prev = i
	}
}

func TestProcStats(t *testing.T) {
	pid := os.Getpid()
	cpu, err := ProcCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	if cpu < 0 {
		t.Errorf("ProcCPU = %v, want ≥ 0", cpu)
	}
	if err := ResetPeak(pid); err != nil {
		t.Fatal(err)
	}
	rss, peak, err := ProcMem(pid)
	if err != nil {
		t.Fatal(err)
	}
	if rss <= 0 || peak < rss/2 {
		t.Errorf("ProcMem = rss %d, peak %d; want rss > 0 and a peak near it", rss, peak)
	}
	m, err := ProcRestMem(pid)
	if err != nil {
		t.Fatal(err)
	}
	if m.Anon <= 0 || m.File <= 0 || m.Anon+m.File > m.RSS {
		t.Errorf("ProcRestMem = %+v; want anonymous and file-backed parts of RSS", m)
	}
	if _, err := ProcRestMem(1 << 30); err == nil {
		t.Error("ProcRestMem of a pid that does not exist: got no error")
	}
	if _, err := ProcCPU(1 << 30); err == nil {
		t.Error("ProcCPU of a pid that does not exist: got no error")
	}
}

// The load client against the upstream directly: paths, body length check, the /cred paths'
// refusal without the credential, and counting.
func TestLoadDirect(t *testing.T) {
	up, err := StartUpstream(BenchToken)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		url     string
		body    int64
		wantErr string
	}{
		{"http small", urlFor("http", up.HTTPAddr, "/small"), SmallBody, ""},
		{"https 64k", urlFor("https", up.HTTPSAddr, "/64k"), LargeBody, ""},
		{"credential missing", urlFor("http", up.HTTPAddr, "/cred/small"), SmallBody, "401"},
		{"wrong length", urlFor("http", up.HTTPAddr, "/small"), 7, "want 7"},
		{"post json", urlFor("http", up.HTTPAddr, "/post"), SmallBody, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Load{URL: tc.url, RootCAs: up.RootCAs(), Concurrency: 2, Warmup: 10 * time.Millisecond, Duration: 100 * time.Millisecond, BodyBytes: tc.body}
			if strings.HasPrefix(tc.name, "post") {
				l.Request = MCPToolCall
			}
			res, err := l.Run(ctx, nil, nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Run error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Requests == 0 || res.Errors != 0 || res.Hist.Count() != res.Requests {
				t.Errorf("requests %d, errors %d, histogram count %d; want some, none, equal", res.Requests, res.Errors, res.Hist.Count())
			}
		})
	}
}

// The bench policy is the shipped one plus the bench upstream: it allows the bench upstream
// with the credential, and the shipped rules still decide everything else.
func TestShippedPolicyWithBenchUpstream(t *testing.T) {
	dir := t.TempDir()
	if err := writeShippedPolicy(dir, "127.0.0.1", []int{8080, 8443}); err != nil {
		t.Fatal(err)
	}
	eng, err := rego.New(context.Background(), rego.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	in := func(phase rego.Phase, method, host string, port int) *rego.Input {
		return &rego.Input{Version: 1, Phase: phase, Sandbox: rego.SandboxInput{ID: "default"},
			Request: rego.RequestInput{Method: method, Scheme: "http", Host: host, Port: port, Path: "/cred/small"}}
	}
	for _, tc := range []struct {
		name      string
		in        *rego.Input
		want      rego.Action
		wantCreds []string
	}{
		{"read with credential", in(rego.PhaseRequest, "GET", "127.0.0.1", 8080), rego.ActionAllow, []string{CredentialName}},
		{"connect", in(rego.PhaseConnect, "CONNECT", "127.0.0.1", 8443), rego.ActionAllow, nil},
		{"other port", in(rego.PhaseRequest, "GET", "127.0.0.1", 9999), rego.ActionDeny, nil},
		{"write", in(rego.PhaseRequest, "POST", "127.0.0.1", 8080), rego.ActionDeny, nil},
		{"shipped registry", in(rego.PhaseConnect, "CONNECT", "pypi.org", 443), rego.ActionAllow, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := eng.Decide(context.Background(), tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if d.Action != tc.want || strings.Join(d.Credentials, ",") != strings.Join(tc.wantCreds, ",") {
				t.Errorf("decision = %s %v (rule %s), want %s %v", d.Action, d.Credentials, d.Rule, tc.want, tc.wantCreds)
			}
		})
	}
}

// The body-aware bench policy reads the bodies of POST /mcp only, allows read tools there,
// and allows everything else without reading its body.
func TestBodyAwareBenchPolicy(t *testing.T) {
	dir := t.TempDir()
	if err := writeBodyAwarePolicy(dir); err != nil {
		t.Fatal(err)
	}
	eng, err := rego.New(context.Background(), rego.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !eng.BodyAware("127.0.0.1", "/mcp") || eng.BodyAware("127.0.0.1", "/post") {
		t.Errorf("body-aware: /mcp %v, /post %v; want true, false", eng.BodyAware("127.0.0.1", "/mcp"), eng.BodyAware("127.0.0.1", "/post"))
	}
	call := func(path, tool string) *rego.Input {
		in := &rego.Input{Version: 1, Phase: rego.PhaseRequest, Sandbox: rego.SandboxInput{ID: "default"},
			Request: rego.RequestInput{Method: "POST", Scheme: "http", Host: "127.0.0.1", Port: 8080, Path: path}}
		if tool != "" {
			in.Request.MCP = &rego.MCPInput{Method: "tools/call", Tool: tool}
		}
		return in
	}
	for _, tc := range []struct {
		in   *rego.Input
		want rego.Action
	}{
		{call("/mcp", "search_issues"), rego.ActionAllow},
		{call("/mcp", "update_issue"), rego.ActionDeny},
		{call("/mcp", ""), rego.ActionDeny},
		{call("/post", ""), rego.ActionAllow},
	} {
		if d, err := eng.Decide(context.Background(), tc.in); err != nil || d.Action != tc.want {
			t.Errorf("%s %+v: %s (%s, %v), want %s", tc.in.Request.Path, tc.in.Request.MCP, d.Action, d.Rule, err, tc.want)
		}
	}
}

func TestWriteMarkdownRatios(t *testing.T) {
	sample := func(rps float64, p50 time.Duration, cpu time.Duration, rss int64) Sample {
		r := &LoadResult{Requests: uint64(rps), Elapsed: time.Second}
		for range 100 {
			r.Hist.Record(p50)
		}
		return Sample{Result: r, CPU: cpu, PeakRSS: rss}
	}
	row := func(peer, label string, rps float64, p50 time.Duration, cpu time.Duration, rss int64) *RowResult {
		return &RowResult{Row: Row{Peer: peer, Workload: HTTPSmall, Label: label},
			Samples: map[int][]Sample{1: {sample(rps/2, p50, 0, rss)}, 64: {sample(rps, p50*10, cpu, rss)}}}
	}
	rep := &Report{Options: Options{Concurrency: []int{1, 64}, Rounds: 1, Duration: time.Second, AuditFsync: "interval"},
		Rows: []*RowResult{
			row(PeerGoproxy, "plain goproxy (baseline)", 4000, 300*time.Microsecond, time.Second, 20<<20),
			row(PeerAirlockPolicy, "airlock", 2000, 600*time.Microsecond, time.Second, 40<<20),
			{Row: Row{Peer: PeerSquid, Workload: HTTPSmall, Label: "squid"}, Skipped: "skipped: squid is not installed"},
		}}
	rep.Rows[1].Rest = &RestMem{RSS: 96 << 20, Anon: 14 << 20, File: 82 << 20}
	var b strings.Builder
	if err := rep.WriteMarkdown(&b, "go run ./bench/cmd/airlock-bench"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// Latencies print as the histogram holds them (within its precision).
	var h1, h2 Histogram
	h1.Record(300 * time.Microsecond)
	h2.Record(600 * time.Microsecond)
	for _, want := range []string{
		"| http-small | plain goproxy (baseline) | 2.0k | " + fmtDur(h1.Quantile(0.5)) + " |",
		"| http-small | airlock | 1.0k (0.50×) | " + fmtDur(h2.Quantile(0.5)) + " (2.00×) |",
		"| 2.50 | 20 MiB |",                 // 1 s over 4,000 requests: 2.5 s per 10k
		"| 5.00 (2.00×) | 40 MiB (2.00×) |", // half the requests for the same CPU
		"squid/http-small: not measured: skipped: squid is not installed",
		"| airlock-policy/http-small | 96.0 MiB | 14.0 MiB | 82.0 MiB |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
