package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/elazarl/goproxy"

	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/secrets"
	"github.com/airlock-proxy/airlock/telemetry"
)

// BenchmarkRequest measures one keep-alive request's cost through each path, side by side in
// one run: direct to the upstream, through a plain goproxy (the baseline), and through
// airlock deciding with the shipped policy over plain HTTP and intercepted HTTPS.
func BenchmarkRequest(b *testing.B) {
	body := []byte("hello from upstream\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(body) })
	up := httptest.NewServer(h)
	defer up.Close()
	// The HTTPS upstream presents a certificate for pypi.org from its own CA, which the
	// proxy trusts through UpstreamCAs.
	upCA, _ := ca.New()
	leaf, _ := upCA.Leaf("pypi.org")
	upTLS := httptest.NewUnstartedServer(h)
	upTLS.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	upTLS.StartTLS()
	defer upTLS.Close()

	plainGP := goproxy.NewProxyHttpServer()
	plainGP.Tr = &http.Transport{MaxIdleConnsPerHost: 256, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	gpSrv := httptest.NewServer(plainGP)
	defer gpSrv.Close()

	// A registry-style policy (host allowlist in data, reads only), on the test ports.
	eng := benchEngine(b)
	c, _ := ca.New()
	upCAs := x509.NewCertPool()
	upCAs.AddCert(upCA.Certificate())
	p, err := New(Options{Decider: eng, CA: c, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		UpstreamCAs: upCAs, Resolver: staticResolver{netip.MustParseAddr("127.0.0.1")}})
	if err != nil {
		b.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go p.Serve(ln)
	defer p.Shutdown(context.Background())
	// The same proxy as airlock-http with what the default config turns on besides: the audit
	// log (its default durability, group commit) and OTel (spans not exported, metrics on).
	fullLn := benchFullProxy(b, eng, c, upCAs)

	roots := x509.NewCertPool()
	roots.AddCert(c.Certificate())
	client := func(proxyAddr string, dialTo string) *http.Client {
		tr := &http.Transport{MaxIdleConnsPerHost: 64, TLSClientConfig: &tls.Config{RootCAs: roots}}
		if proxyAddr != "" {
			tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: proxyAddr})
		}
		if dialTo != "" {
			tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, dialTo)
			}
		}
		return &http.Client{Transport: tr}
	}
	upTLSPort := mustURL(upTLS.URL).Port()
	run := func(b *testing.B, c *http.Client, u string) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := c.Get(u)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	}
	b.Run("direct", func(b *testing.B) { run(b, client("", ""), up.URL+"/simple/") })
	b.Run("goproxy", func(b *testing.B) { run(b, client(gpSrv.Listener.Addr().String(), ""), up.URL+"/simple/") })
	b.Run("airlock-http", func(b *testing.B) {
		run(b, client(ln.Addr().String(), ""), "http://pypi.org:"+mustURL(up.URL).Port()+"/simple/")
	})
	b.Run("airlock-http-audit-otel", func(b *testing.B) {
		run(b, client(fullLn.Addr().String(), ""), "http://pypi.org:"+mustURL(up.URL).Port()+"/simple/")
	})
	for _, v := range []struct {
		name                string
		withAudit, withOTel bool
	}{{"airlock-http-audit", true, false}, {"airlock-http-otel", false, true}} {
		ln := benchProxyWith(b, eng, c, upCAs, v.withAudit, v.withOTel)
		b.Run(v.name, func(b *testing.B) {
			run(b, client(ln.Addr().String(), ""), "http://pypi.org:"+mustURL(up.URL).Port()+"/simple/")
		})
	}
	b.Run("airlock-https-intercepted", func(b *testing.B) {
		run(b, client(ln.Addr().String(), ""), "https://pypi.org:"+upTLSPort+"/simple/")
	})
}

// benchFullProxy starts a proxy like BenchmarkRequest's with an audit log in a temporary
// directory and OTel telemetry, as airlock proxy runs by default.
func benchFullProxy(b testing.TB, eng *rego.Engine, c *ca.CA, upCAs *x509.CertPool) net.Listener {
	b.Helper()
	return benchProxyWith(b, eng, c, upCAs, true, true)
}

// benchProxyWith is benchFullProxy with the audit log and OTel each on or off, so that
// BenchmarkRequest can say what each costs.
func benchProxyWith(b testing.TB, eng *rego.Engine, c *ca.CA, upCAs *x509.CertPool, withAudit, withOTel bool) net.Listener {
	b.Helper()
	b.Setenv("AIRLOCK_BENCH_TOKEN", "bench-token-value")
	broker, err := secrets.New(context.Background(), secrets.Options{Credentials: map[string]secrets.CredentialConfig{
		"bench-token": {Env: "AIRLOCK_BENCH_TOKEN", Inject: secrets.Inject{Header: "Authorization", Value: "Bearer {{ .value }}"}},
	}})
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{Decider: eng, CA: c, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		UpstreamCAs: upCAs, Resolver: staticResolver{netip.MustParseAddr("127.0.0.1")},
		PolicyRevision: eng.Revision, Credentials: broker}
	if withOTel {
		for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
			b.Setenv(k, "")
		}
		tel, err := telemetry.Setup(context.Background(), telemetry.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { tel.Shutdown(context.Background()) })
		opts.Telemetry = &OTel{T: tel}
	}
	if withAudit {
		sink, err := audit.Open(audit.Options{Path: filepath.Join(b.TempDir(), "audit.jsonl")})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { sink.Close() })
		opts.Auditor = sink
	}
	p, err := New(opts)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go p.Serve(ln)
	b.Cleanup(func() { p.Shutdown(context.Background()) })
	return ln
}

const benchPolicy = `package airlock

default decision := {"action": "deny", "rule": "default.deny", "reason": "not allowed"}

decision := {"action": "allow", "rule": "registries.connect"} if {
	input.phase == "connect"
	data.hosts.registries[input.request.host]
}

decision := {"action": "allow", "rule": "registries.read"} if {
	input.phase == "request"
	data.hosts.registries[input.request.host]
	input.request.method in {"GET", "HEAD"}
}

decision := {"action": "allow", "rule": "bench.credential", "credentials": ["bench-token"]} if {
	input.phase == "request"
	input.request.host == "cred.example"
}
`

func benchEngine(b testing.TB) *rego.Engine {
	dir := b.TempDir()
	os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(benchPolicy), 0o600)
	os.WriteFile(filepath.Join(dir, "data.json"), []byte(`{"hosts": {"registries": {"pypi.org": {"ecosystem": "PyPI"}, "proxy.golang.org": {"ecosystem": "Go"}}}}`), 0o600)
	eng, err := rego.New(context.Background(), rego.Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	return eng
}

// BenchmarkDecision is the policy evaluation alone, as the proxy calls it.
func BenchmarkDecision(b *testing.B) {
	eng, err := rego.New(context.Background(), rego.Options{})
	if err != nil {
		b.Fatal(err)
	}
	in := &rego.Input{Version: 1, Phase: rego.PhaseRequest, Sandbox: rego.SandboxInput{ID: "bench"},
		Request: rego.RequestInput{Method: "GET", Scheme: "https", Host: "pypi.org", Port: 443, Path: "/simple/requests/",
			Headers: map[string][]string{"accept": {"*/*"}, "user-agent": {"bench"}}}}
	b.ReportAllocs()
	for b.Loop() {
		d, err := eng.Decide(context.Background(), in)
		if err != nil || !d.Allows() {
			b.Fatalf("decision %+v, %v", d, err)
		}
	}
}

type staticResolver []netip.Addr

func (s staticResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return s, nil
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}
