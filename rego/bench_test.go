package rego

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

func benchInput(method, host, path string) *Input {
	return &Input{
		Version: 1,
		Phase:   PhaseRequest,
		Sandbox: SandboxInput{ID: "sbx-bench", Labels: map[string]string{"tenant": "acme"}},
		Request: RequestInput{
			Method: method, Scheme: "https", Host: host, Port: 443, Path: path,
			Query:   map[string][]string{"page": {"2"}},
			Headers: map[string][]string{"accept": {"application/json"}, "user-agent": {"bench/1"}},
		},
	}
}

func benchDecide(b *testing.B, e *Engine, in *Input, want Action) {
	b.Helper()
	ctx := context.Background()
	lat := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	cpu0 := processCPU(b)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		d, err := e.Decide(ctx, in)
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(t0))
		}
		if err != nil || d.Action != want {
			b.Fatalf("Decide = %+v, %v; want %s", d, err, want)
		}
	}
	b.StopTimer()
	// The machines are shared: wall time per op includes waiting for a CPU. Process CPU
	// time per op (GC included) and the median latency tell the policy's own cost.
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
}

// processCPU returns the user and system CPU time this process has used.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDecide measures the shipped policy on the request phase: "eval/" evaluates
// every time (the cost of a request not seen before), "cached/" repeats a decided input.
func BenchmarkDecide(b *testing.B) {
	for _, mode := range []string{"eval", "cached"} {
		e, err := New(context.Background(), Options{Timeout: testEvalTimeout, NoDecisionCache: mode == "eval"})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(mode, func(b *testing.B) { benchShipped(b, e) })
	}
}

func benchShipped(b *testing.B, e *Engine) {
	b.Run("allow", func(b *testing.B) {
		benchDecide(b, e, benchInput("GET", "proxy.golang.org", "/golang.org/x/net/@v/list"), ActionAllow)
	})
	b.Run("deny", func(b *testing.B) {
		benchDecide(b, e, benchInput("GET", "evil.example.com", "/exfil"), ActionDeny)
	})
	b.Run("approve", func(b *testing.B) {
		benchDecide(b, e, benchInput("POST", "api.github.com", "/repos/acme/app/issues"), ActionApprove)
	})
	b.Run("parallel-allow", func(b *testing.B) {
		in := benchInput("GET", "proxy.golang.org", "/golang.org/x/net/@v/list")
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if d, err := e.Decide(context.Background(), in); err != nil || !d.Allows() {
					b.Errorf("Decide = %+v, %v", d, err)
					return
				}
			}
		})
	})
}

// BenchmarkDecideAllowlist10k measures the shipped rules with 10,000 registry hosts as data.
func BenchmarkDecideAllowlist10k(b *testing.B) {
	dir := b.TempDir()
	writeShippedRules(b, dir)
	var data map[string]any
	raw, err := ShippedPolicy().(interface{ ReadFile(string) ([]byte, error) }).ReadFile("data.json")
	if err != nil {
		b.Fatal(err)
	}
	if err := json.Unmarshal(raw, &data); err != nil {
		b.Fatal(err)
	}
	regs := data["hosts"].(map[string]any)["registries"].(map[string]any)
	for i := range 10000 {
		regs[fmt.Sprintf("mirror-%05d.registry.example.com", i)] = map[string]any{"ecosystem": "mirror"}
	}
	out, err := json.Marshal(data)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data.json"), out, 0o644); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"eval", "cached"} {
		e, err := New(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout, NoDecisionCache: mode == "eval"})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(mode+"/allow", func(b *testing.B) {
			benchDecide(b, e, benchInput("GET", "mirror-05000.registry.example.com", "/pkg"), ActionAllow)
		})
		b.Run(mode+"/deny", func(b *testing.B) {
			benchDecide(b, e, benchInput("GET", "mirror-10001.registry.example.com", "/pkg"), ActionDeny)
		})
	}
}
