package bench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/internal/hostname"
	"github.com/airlock-proxy/airlock/secrets"
)

// The Go benchmarks that live nowhere else. Policy evaluation (shipped policy and
// a 10,000-host allowlist) is rego.BenchmarkDecide and rego.BenchmarkDecideAllowlist10k; a
// request through each proxy is proxy.BenchmarkRequest; sandbox create→exec→destroy is in
// sandbox/. Each runs in well under a second with -benchtime=1x.

// BenchmarkNormalizeHost is the host normalisation every request and CONNECT goes through.
func BenchmarkNormalizeHost(b *testing.B) {
	for _, tc := range []struct{ name, host, want string }{
		{"ascii", "pypi.org", "pypi.org"},
		{"upper-trailing-dot", "PyPI.ORG.", "pypi.org"},
		{"idn", "bücher.example", "xn--bcher-kva.example"},
		{"ipv4-decimal", "2130706433", "127.0.0.1"},
		{"ipv6", "[::ffff:127.0.0.1]", "127.0.0.1"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				got, err := hostname.Normalize(tc.host)
				if err != nil || got != tc.want {
					b.Fatalf("Normalize(%q) = %q, %v; want %q", tc.host, got, err, tc.want)
				}
			}
		})
	}
}

func newEnvBroker(tb testing.TB) *secrets.Broker {
	tb.Setenv("AIRLOCK_BENCH_TOKEN", BenchToken)
	br, err := secrets.New(context.Background(), secrets.Options{Credentials: map[string]secrets.CredentialConfig{
		CredentialName: {Env: "AIRLOCK_BENCH_TOKEN", Inject: secrets.Inject{Header: "Authorization", Value: "Bearer {{ .value }}"}},
	}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = br.Close(context.Background()) })
	return br
}

// BenchmarkCredentialCacheHit is Attach of a credential already cached for the sandbox: the
// per-request cost of injection once the first request has fetched it.
func BenchmarkCredentialCacheHit(b *testing.B) {
	br := newEnvBroker(b)
	out, _ := http.NewRequest(http.MethodGet, "https://api.internal.example/v1/items", nil)
	ar := secrets.AttachRequest{SandboxID: "sbx-bench", Names: []string{CredentialName}, Out: out}
	if _, err := br.Attach(context.Background(), ar); err != nil { // the miss that fills the cache
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		s, err := br.Attach(context.Background(), ar)
		if err != nil || s == nil {
			b.Fatalf("Attach = %v, %v", s, err)
		}
	}
	if got := out.Header.Get("Authorization"); got != "Bearer "+BenchToken {
		b.Fatalf("Authorization = %q, want the injected value", got)
	}
}

// BenchmarkScrubResponse is the scrubbing of an upstream response after an injection:
// headers and the streamed body, with and without the secret echoed in it.
func BenchmarkScrubResponse(b *testing.B) {
	br := newEnvBroker(b)
	out, _ := http.NewRequest(http.MethodGet, "https://api.internal.example/v1/items", nil)
	scrub, err := br.Attach(context.Background(), secrets.AttachRequest{SandboxID: "sbx-bench", Names: []string{CredentialName}, Out: out})
	if err != nil || scrub == nil {
		b.Fatalf("Attach = %v, %v", scrub, err)
	}
	large := bytes.Repeat([]byte("0123456789abcdef"), LargeBody/16)
	echoed := append(bytes.Clone(large[:LargeBody/2]), BenchToken...)
	echoed = append(echoed, large[:LargeBody/2]...)
	for _, tc := range []struct {
		name   string
		body   []byte
		redact bool
	}{
		{"small", large[:SmallBody], false},
		{"64k-clean", large, false},
		{"64k-echoed", echoed, true},
	} {
		newResp := func() *http.Response {
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"},
				"Content-Length": {strconv.Itoa(len(tc.body))}}, Body: io.NopCloser(bytes.NewReader(tc.body)),
				ContentLength: int64(len(tc.body))}
		}
		b.Run(tc.name, func(b *testing.B) {
			resp := newResp()
			scrub.ScrubResponse(resp)
			got, err := io.ReadAll(resp.Body)
			if err != nil {
				b.Fatal(err)
			}
			if bytes.Contains(got, []byte(BenchToken)) || strings.Contains(string(got), secrets.Redaction) != tc.redact {
				b.Fatalf("scrubbed body: secret present %v, redaction present %v; want redaction %v",
					bytes.Contains(got, []byte(BenchToken)), strings.Contains(string(got), secrets.Redaction), tc.redact)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.body)))
			for b.Loop() {
				resp := newResp()
				scrub.ScrubResponse(resp)
				// As the proxy forwards a body: copied out through a small buffer.
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
		})
	}
}

// BenchmarkAuditRecord is one audit event appended to the hash-chained log, per fsync
// policy, from one goroutine and from 64 at once (whose events are group-committed).
func BenchmarkAuditRecord(b *testing.B) {
	for _, fsync := range []string{audit.FsyncNever, audit.FsyncGroup, audit.FsyncInterval, audit.FsyncAlways} {
		for _, par := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/c=%d", fsync, par), func(b *testing.B) {
				s, err := audit.Open(audit.Options{Path: filepath.Join(b.TempDir(), "audit.jsonl"), Fsync: fsync})
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = s.Close() })
				ev := audit.Event{Kind: "request", SandboxID: "sbx-bench", Labels: map[string]string{"tenant": "acme"},
					Method: "GET", Scheme: "https", Host: "pypi.org", Port: 443, Path: "/simple/requests/",
					Decision: "allow", Rule: "registries.read", Reason: "reading from the PyPI package registry pypi.org is allowed",
					Status: 200, BytesOut: 20, DurationMS: 0.4}
				b.ReportAllocs()
				if par == 1 {
					for b.Loop() {
						if err := s.Record(context.Background(), &ev); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				b.SetParallelism(max(1, par/runtime.GOMAXPROCS(0)))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := s.Record(context.Background(), &ev); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
