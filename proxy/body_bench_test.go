package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/rego"
)

const bodyBenchPolicy = `package airlock

default decision := {"action": "deny", "rule": "default.deny", "reason": "not allowed"}

decision := {"action": "allow", "rule": "mcp.read-tool"} if {
	input.phase == "request"
	input.request.host == "mcp.test"
	input.request.method == "POST"
	input.request.mcp.method == "tools/call"
	input.request.mcp.tool in {"search_issues", "get_issue"}
}

decision := {"action": "allow", "rule": "plain.post"} if {
	input.phase == "request"
	input.request.host == "plain.test"
	input.request.method == "POST"
}
`

// toolCall is a ~1 KiB MCP tools/call with JSON-RPC id.
func toolCall(id int) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"search_issues","arguments":{"repo":"acme/app","query":"is:open label:bug sort:updated-desc","fields":["title","state","labels","assignees","comments"],"limit":50,"note":%q}}}`,
		id, strings.Repeat("lorem ipsum dolor sit amet ", 32))
}

// BenchmarkBodyAware compares a ~1 KiB MCP tools/call through airlock to a body-aware
// destination (parsed, decided on its tool) with the same request to a destination that is
// not body-aware, over plain HTTP on one keep-alive connection. "new-id" gives each call
// its own JSON-RPC id, as MCP clients do (every decision is then a cache miss); "same"
// repeats one body (cache hits). cpu-us/op is the whole process's CPU (client, proxy and
// upstream) per request: the difference between rows is the proxy's extra cost.
func BenchmarkBodyAware(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`)
	}))
	defer up.Close()
	dir := b.TempDir()
	os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(bodyBenchPolicy), 0o600)
	os.WriteFile(filepath.Join(dir, "data.json"), []byte(`{"body_aware": {"mcp.test": ["/mcp"]}}`), 0o600)
	eng, err := rego.New(context.Background(), rego.Options{Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	c, _ := ca.New()
	p, err := New(Options{Decider: eng, CA: c, AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver: staticResolver{netip.MustParseAddr("127.0.0.1")}})
	if err != nil {
		b.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go p.Serve(ln)
	defer p.Shutdown(context.Background())
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4,
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: ln.Addr().String()})}}
	port := mustURL(up.URL).Port()
	run := func(b *testing.B, host string, newID bool) {
		b.ReportAllocs()
		u := "http://" + host + ":" + port + "/mcp"
		body := toolCall(1)
		b.SetBytes(int64(len(body)))
		defer cpuPerOp(b)()
		i := 0
		for b.Loop() {
			i++
			if newID {
				body = toolCall(i)
			}
			req, _ := http.NewRequest(http.MethodPost, u, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
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
	b.Run("not-body-aware/same", func(b *testing.B) { run(b, "plain.test", false) })
	b.Run("not-body-aware/new-id", func(b *testing.B) { run(b, "plain.test", true) })
	b.Run("body-aware/same", func(b *testing.B) { run(b, "mcp.test", false) })
	b.Run("body-aware/new-id", func(b *testing.B) { run(b, "mcp.test", true) })
}

// argsBenchPolicy decides on a tools/call's arguments, so that calls with other arguments
// are evaluated afresh (decision-cache misses).
const argsBenchPolicy = `package airlock

default decision := {"action": "deny", "rule": "default.deny", "reason": "not allowed"}

decision := {"action": "allow", "rule": "mcp.read-tool"} if {
	input.request.host == "mcp.test"
	input.request.mcp.tool in {"search_issues", "get_issue"}
	input.request.mcp.arguments.repo == "acme/app"
	input.request.mcp.arguments.limit <= 100000000
}

decision := {"action": "allow", "rule": "plain.post"} if input.request.host == "plain.test"
`

// BenchmarkBodyAwareDecision isolates what a body-aware request adds in the proxy: reading
// and parsing the body, building the views and deciding on them, against deciding the same
// request to a destination that is not body-aware (whose body is not read). Everything else
// a request costs is the same for both. "new-args" changes an argument on every call under
// a policy that reads the arguments: every body-aware call is a full evaluation.
func BenchmarkBodyAwareDecision(b *testing.B) {
	proxyFor := func(b *testing.B, policy string) *Proxy {
		dir := b.TempDir()
		os.WriteFile(filepath.Join(dir, "policy.rego"), []byte(policy), 0o600)
		os.WriteFile(filepath.Join(dir, "data.json"), []byte(`{"body_aware": {"mcp.test": ["/mcp"]}}`), 0o600)
		eng, err := rego.New(context.Background(), rego.Options{Dir: dir})
		if err != nil {
			b.Fatal(err)
		}
		c, _ := ca.New()
		p, err := New(Options{Decider: eng, CA: c})
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	run := func(b *testing.B, p *Proxy, host string, vary string) {
		b.ReportAllocs()
		body := toolCall(1)
		i := 0
		defer cpuPerOp(b)()
		for b.Loop() {
			i++
			switch vary {
			case "new-id":
				body = toolCall(i)
			case "new-args":
				body = bytes.Replace(toolCall(1), []byte(`"limit":50`), fmt.Appendf(nil, `"limit":%d`, i), 1)
			}
			r, _ := http.NewRequest(http.MethodPost, "http://"+host+"/mcp", bytes.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			t := target{scheme: "http", host: host, port: 80, path: "/mcp"}
			st := p.begin(r.Context(), r, identity.Identity{ID: "bench"}, "request")
			var calls []bodyCall
			if p.opts.BodyAware.BodyAware(t.host, t.path) {
				var f *refusal
				if calls, f = p.readPolicyBody(r, t); f != nil {
					b.Fatal(f.reason)
				}
			}
			d, err := p.decideCalls(st, requestInput(st.id, r, t), calls)
			if err != nil || !d.Allows() {
				b.Fatalf("%+v %v", d, err)
			}
		}
	}
	tool, args := proxyFor(b, bodyBenchPolicy), proxyFor(b, argsBenchPolicy)
	for _, vary := range []string{"same", "new-id"} {
		b.Run("not-body-aware/"+vary, func(b *testing.B) { run(b, tool, "plain.test", vary) })
		b.Run("body-aware/"+vary, func(b *testing.B) { run(b, tool, "mcp.test", vary) })
	}
	b.Run("not-body-aware/new-args", func(b *testing.B) { run(b, args, "plain.test", "new-args") })
	b.Run("body-aware/new-args", func(b *testing.B) { run(b, args, "mcp.test", "new-args") })
}

// cpuPerOp reports the process's CPU time (user and system) per operation as cpu-us/op:
// on a shared machine it says what the work costs, where ns/op also counts waiting.
func cpuPerOp(b *testing.B) func() {
	cpu := func() int64 {
		var r syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &r)
		return r.Utime.Sec*1e6 + r.Utime.Usec + r.Stime.Sec*1e6 + r.Stime.Usec
	}
	start := cpu()
	return func() { b.ReportMetric(float64(cpu()-start)/float64(b.N), "cpu-us/op") }
}
