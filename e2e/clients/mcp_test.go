//go:build e2e

package clients_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// TestMCPClientInSandbox: an MCP client built with the official Go SDK runs in a native
// sandbox and talks streamable HTTP (responses as server-sent events) to an MCP server built
// with the same SDK, through airlock deciding with the shipped MCP rules (mcp.rego): the
// read tool passes, the write tool is held until an approver who sees the tool and its
// arguments approves it, and a tool the approver denies never reaches the server.
func TestMCPClientInSandbox(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	workspace := filepath.Join(dir, "workspace")
	os.MkdirAll(workspace, 0o777)
	os.Chmod(workspace, 0o777)

	build := exec.Command("go", "build", "-o", filepath.Join(workspace, "mcpclient"), "./testdata/mcpclient")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the MCP client: %v\n%s", err, out)
	}

	srv := mcp.NewServer(&mcp.Implementation{Name: "issues", Version: "1.0.0"}, nil)
	var ran []string
	type args struct {
		ID    int    `json:"id"`
		State string `json:"state,omitempty"`
	}
	for _, name := range []string{"get_issue", "update_issue", "drop_database"} {
		mcp.AddTool(srv, &mcp.Tool{Name: name}, func(ctx context.Context, _ *mcp.CallToolRequest, in args) (*mcp.CallToolResult, any, error) {
			ran = append(ran, name)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s #%d %s", name, in.ID, in.State)}}}, nil, nil
		})
	}
	upCA, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	// The server listens on loopback but is reached by the name mcp.test, as a real server
	// would be: the SDK's DNS-rebinding guard for loopback servers is off for that.
	up := httptest.NewUnstartedServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true}))
	up.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return upCA.Leaf(h.ServerName) }}
	up.StartTLS()
	t.Cleanup(up.Close)
	port := mustPort(t, up.URL)

	// The shipped base and MCP rules, with data naming this server.
	pdir := filepath.Join(dir, "policy")
	os.MkdirAll(pdir, 0o700)
	for _, f := range []string{"airlock.rego", "mcp.rego", "mcp_test.rego", "helpers_test.rego"} {
		b, err := fs.ReadFile(rego.ShippedPolicy(), f)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(pdir, f), b, 0o600)
	}
	data := fmt.Sprintf(`{"hosts": {"mcp": {"mcp.internal.example": {"path": "/mcp", "read_tools": ["search_issues", "get_issue", "list_issues"], "credential": "mcp-internal"},
		"mcp.test": {"path": "/mcp", "ports": [%s], "read_tools": ["get_issue"]}}},
		"body_aware": {"mcp.test": ["/mcp"], "mcp.internal.example": ["/mcp"], "api.github.com": ["/graphql"]}}`, port)
	os.WriteFile(filepath.Join(pdir, "data.json"), []byte(data), 0o600)
	eng, err := rego.New(ctx, rego.Options{Dir: pdir})
	if err != nil {
		t.Fatal(err)
	}
	approvals := e2etest.Approvals(t, dir)
	airCA, err := ca.New()
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(upCA.Certificate())
	audit := &e2etest.Recorder{}
	p, err := proxy.New(proxy.Options{
		Decider: eng, CA: airCA, Auditor: audit, Approver: approvals, UpstreamCAs: roots,
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver:     e2etest.StaticResolver{netip.MustParseAddr("127.0.0.1")},
		Limits:       proxy.Limits{MaxBodyBytes: approvals.MaxBody()},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	sys, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Skip("no system CA bundle")
	}
	sb := newSandbox(t, sandbox.Options{ID: fmt.Sprintf("sbx-mcp-%d", os.Getpid()), Proxy: p, CABundle: append(append(sys, '\n'), airCA.CertPEM()...),
		Workspace: workspace, Timeout: 2 * time.Minute})

	// The approver: approves update_issue once it sees the tool and its arguments, denies
	// anything else.
	seen := make(chan approval.Record, 4)
	go func() {
		for range 2 {
			rec := e2etest.Pending(t, approvals)
			seen <- rec
			state := approval.StateDenied
			if len(rec.Calls) == 1 && rec.Calls[0].Tool == "update_issue" && strings.Contains(string(rec.Calls[0].Arguments), `"state":"closed"`) {
				state = approval.StateApproved
			}
			approvals.Decide(context.Background(), rec.ID, state, "oncall", "")
		}
	}()
	res, err := sb.Run(ctx, sandbox.Command{Args: []string{"./mcpclient", "https://mcp.test:" + port + "/mcp"}, Dir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout) + string(res.Stderr)
	for _, want := range []string{"connect ok", "list ok 3", "get_issue ok get_issue #7", "update_issue ok update_issue #12 closed", "drop_database error"} {
		if !strings.Contains(out, want) {
			t.Errorf("client output lacks %q:\n%s", want, out)
		}
	}
	if strings.Join(ran, ",") != "get_issue,update_issue" {
		t.Errorf("the server ran %v, want get_issue then update_issue (drop_database denied by the approver)", ran)
	}
	var rec approval.Record
	select {
	case rec = <-seen:
	case <-time.After(10 * time.Second):
		t.Fatal("nothing was held for approval")
	}
	if rec.Rule != "mcp.write-tool" || rec.Calls[0].Method != "tools/call" {
		t.Errorf("held record: rule %q calls %+v", rec.Rule, rec.Calls)
	}
}

func mustPort(t *testing.T, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}
