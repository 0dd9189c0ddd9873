//go:build e2e

package bypass_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// bodyPolicy decides the body-aware endpoints of upstream.test (data.body_aware): /mcp is a
// real MCP server (the official Go SDK) whose read tool get_issue and protocol messages
// pass and whose write tools are refused by name; /graphql takes queries and refuses
// mutations; /fuzz takes any JSON body (FuzzBodyDifferential).
const bodyPolicy = `package airlock

body_post(path) if {
	input.phase == "request"
	not blocked
	port_ok
	input.request.method == "POST"
	input.request.path == path
}

decision := {"action": "allow", "rule": "body.mcp-read"} if {
	body_post("/mcp")
	input.request.mcp.method == "tools/call"
	input.request.mcp.tool == "get_issue"
}

decision := {"action": "allow", "rule": "body.mcp-protocol"} if {
	body_post("/mcp")
	input.request.mcp.method in {"initialize", "notifications/initialized", "ping", "tools/list"}
}

decision := {"action": "deny", "rule": "body.mcp-write", "reason": concat(" ", ["the MCP tool", input.request.mcp.tool, "writes"])} if {
	body_post("/mcp")
	input.request.mcp.method == "tools/call"
	input.request.mcp.tool in {"update_issue", "delete_issue"}
}

graphql_request if {
	input.phase == "request"
	not blocked
	port_ok
	input.request.method in {"GET", "POST"}
	input.request.path == "/graphql"
}

decision := {"action": "allow", "rule": "body.graphql-query"} if {
	graphql_request
	input.request.graphql.operation_type == "query"
}

decision := {"action": "deny", "rule": "body.graphql-mutation", "reason": concat(",", input.request.graphql.root_fields)} if {
	graphql_request
	input.request.graphql.operation_type == "mutation"
}

decision := {"action": "allow", "rule": "body.fuzz"} if body_post("/fuzz")
`

// bodyAware is data.body_aware of the bypass policy; maxPolicyBody the proxy's bound on
// the bodies it reads there.
var bodyAware = map[string][]string{"upstream.test": {"/mcp", "/graphql", "/fuzz"}}

const maxPolicyBody = 16 << 10

// mcpUpstream is a real MCP server over streamable HTTP (stateless, so that each case may
// call a tool without a session first) that records each request as it received it.
func (e *env) mcpUpstream(server string) http.Handler {
	srv := mcp.NewServer(&mcp.Implementation{Name: "issues", Version: "1.0.0"}, nil)
	type issueArgs struct {
		ID    int    `json:"id"`
		State string `json:"state,omitempty"`
	}
	for _, name := range []string{"get_issue", "update_issue", "delete_issue"} {
		mcp.AddTool(srv, &mcp.Tool{Name: name}, func(_ context.Context, _ *mcp.CallToolRequest, in issueArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s #%d %s", name, in.ID, in.State)}}}, nil, nil
		})
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: true, DisableLocalhostProtection: true})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		e.record(seen{Server: server, Method: r.Method, URI: r.RequestURI, Host: r.Host, Header: r.Header.Clone(), Body: body})
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	})
}

// jsonHeaders are what an MCP client sends with a message.
const jsonHeaders = "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"

// postRaw sends body to path on upstream.test over plain HTTP with the given header lines
// (each ending in CRLF); Content-Length is added unless they give a Transfer-Encoding.
func (e *env) postRaw(t *testing.T, path, headers, body string) result {
	t.Helper()
	host := fmt.Sprintf("upstream.test:%d", e.port)
	req := "POST http://" + host + path + " HTTP/1.1\r\nHost: " + host + "\r\n" + headers
	if !strings.Contains(strings.ToLower(headers), "transfer-encoding:") {
		req += "Content-Length: " + strconv.Itoa(len(body)) + "\r\n"
	}
	return e.raw(t, req+"\r\n"+body)
}

func toolCall(id int, name, args string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":%s}}`, id, name, args)
}

func gzipped(s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	io.WriteString(w, s)
	w.Close()
	return b.String()
}

func chunked(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		n := min(len(s), 4096)
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, s[:n])
		s = s[n:]
	}
	return b.String() + "0\r\n\r\n"
}

// bodyCases: requests to body-aware destinations whose bodies could be read one way by the
// policy and another by the server (each refused with a 4xx that says why, before anything
// reaches the upstream), writes hidden in names, batches and encodings (refused by the
// policy's rule for the write), and what must pass byte for byte, SSE answers included.
func bodyCases(e *env) []attack {
	write := toolCall(2, "update_issue", `{"id":12,"state":"closed"}`)
	read := toolCall(1, "get_issue", `{"id":7}`)
	post := func(path, headers, body string) func(t *testing.T, e *env) result {
		return func(t *testing.T, e *env) result { return e.postRaw(t, path, headers, body) }
	}
	mcpPost := func(body string) func(t *testing.T, e *env) result { return post("/mcp", jsonHeaders, body) }
	ambiguous := func(name, body string, status int, reason string) attack {
		return attack{name: name, send: mcpPost(body), status: status, rule: "body.ambiguous", reason: reason, host: "upstream.test", path: "/mcp", port: e.port}
	}
	gql := func(q string) string { return fmt.Sprintf(`{"query":%q}`, q) }
	big := toolCall(1, "get_issue", `{"pad":"`+strings.Repeat("x", maxPolicyBody)+`"}`)
	cases := []attack{
		ambiguous("MCP: duplicate keys (one tool for the policy, another for the server)",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue","name":"update_issue"}}`, 400, "duplicate object key"),
		ambiguous("MCP: duplicate keys by unicode escape",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue","n\u0061me":"update_issue"}}`, 400, "duplicate object key"),
		ambiguous("MCP: a key that differs only in case (Go servers match it)",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue","NAME":"update_issue"}}`, 400, "only in case"),
		ambiguous("MCP: invalid UTF-8 in the tool name", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"get_issue\xff\"}}", 400, "UTF-8"),
		ambiguous("MCP: lone surrogate escape in the tool name", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue\ud800"}}`, 400, "surrogate"),
		ambiguous("MCP: byte order mark before the document", "\ufeff"+write, 400, "invalid JSON"),
		ambiguous("MCP: a second document after the first", read+write, 400, "after the JSON value"),
		ambiguous("MCP: JSON-RPC message that is also a GraphQL request",
			`{"jsonrpc":"2.0","id":1,"method":"ping","query":"mutation { deleteRepo(id: 1) { id } }"}`, 400, "both a JSON-RPC message"),
		{name: "MCP: unknown Content-Encoding (br)", send: post("/mcp", jsonHeaders+"Content-Encoding: br\r\n", write),
			status: 415, rule: "body.ambiguous", reason: "Content-Encoding", host: "upstream.test", path: "/mcp", port: e.port},
		{name: "MCP: gzip-compressed write", send: post("/mcp", jsonHeaders+"Content-Encoding: gzip\r\n", gzipped(write)),
			status: 415, rule: "body.ambiguous", reason: "does not decode", host: "upstream.test", path: "/mcp", port: e.port},
		{name: "MCP: JSON under text/plain", send: post("/mcp", "Content-Type: text/plain\r\n", write),
			status: 415, rule: "body.ambiguous", reason: "not application/json", host: "upstream.test", path: "/mcp", port: e.port},
		{name: "MCP: JSON with no Content-Type", send: post("/mcp", "", write),
			status: 415, rule: "body.ambiguous", reason: "exactly one Content-Type", host: "upstream.test", path: "/mcp", port: e.port},
		{name: "MCP: two Content-Type headers", send: post("/mcp", jsonHeaders+"Content-Type: text/plain\r\n", write),
			status: 415, rule: "body.ambiguous", reason: "exactly one Content-Type", host: "upstream.test", path: "/mcp", port: e.port},
		{name: "MCP: JSON declared UTF-16", send: post("/mcp", "Content-Type: application/json; charset=utf-16\r\n", write),
			status: 415, rule: "body.ambiguous", reason: "charset", host: "upstream.test", path: "/mcp", port: e.port},
		{name: "MCP: body over the bound (Content-Length)", send: mcpPost(big),
			status: 413, rule: "limits.policy_body", reason: "max_policy_body_bytes", host: "upstream.test", path: "/mcp", port: e.port},
		{name: "MCP: chunked body over the bound", send: post("/mcp", jsonHeaders+"Transfer-Encoding: chunked\r\n", chunked(big)),
			status: 413, rule: "limits.policy_body", reason: "max_policy_body_bytes", host: "upstream.test", path: "/mcp", port: e.port},
		{name: "MCP: duplicate keys in a chunked body", send: post("/mcp", jsonHeaders+"Transfer-Encoding: chunked\r\n",
			chunked(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue","name":"update_issue"}}`)),
			status: 400, rule: "body.ambiguous", reason: "duplicate object key", host: "upstream.test", path: "/mcp", port: e.port},
		{name: "MCP: unicode escapes in a write tool's name", send: mcpPost(toolCall(3, `upd\u0061te\u005fissue`, `{"id":1}`)),
			status: 403, rule: "body.mcp-write", reason: "the MCP tool update_issue writes", host: "upstream.test", path: "/mcp", port: e.port},
		{name: "MCP: escaped method name", send: mcpPost(`{"jsonrpc":"2.0","id":1,"method":"tools\u002fcall","params":{"name":"delete_issue","arguments":{"id":1}}}`),
			status: 403, rule: "body.mcp-write", reason: "delete_issue", host: "upstream.test", path: "/mcp", port: e.port},
		{name: "MCP: batch of a read and a write (the strictest decision wins)", send: mcpPost("[" + read + "," + write + "]"),
			status: 403, rule: "body.mcp-write", reason: "batch call 1 (tools/call update_issue)", host: "upstream.test", path: "/mcp", port: e.port},
		{name: "MCP: batch hiding a write behind a notification", send: mcpPost(`[{"jsonrpc":"2.0","method":"notifications/initialized"},` + write + "]"),
			status: 403, rule: "body.mcp-write", reason: "batch call 1", host: "upstream.test", path: "/mcp", port: e.port},
		{name: "GraphQL: several operations and no operationName", send: post("/graphql", "Content-Type: application/json\r\n", gql("query A { viewer { login } } mutation B { deleteRepo(id: 1) { id } }")),
			status: 400, rule: "body.ambiguous", reason: "several operations", host: "upstream.test", path: "/graphql", port: e.port},
		{name: "GraphQL: several operations over GET without operationName", send: func(t *testing.T, e *env) result {
			q := url.QueryEscape("query A { viewer { login } } mutation B { deleteRepo(id: 1) { id } }")
			return e.raw(t, fmt.Sprintf("GET %s/graphql?query=%s HTTP/1.1\r\nHost: upstream.test:%d\r\n\r\n", e.upstreamURL(), q, e.port))
		}, status: 400, rule: "body.ambiguous", reason: "several operations", host: "upstream.test", path: "/graphql", port: e.port},
		{name: "GraphQL: a query in the URL and another in the body", send: func(t *testing.T, e *env) result {
			return e.postRaw(t, "/graphql?query="+url.QueryEscape("mutation { deleteRepo(id: 1) { id } }"), "Content-Type: application/json\r\n", gql("query { viewer { login } }"))
		}, status: 400, rule: "body.ambiguous", reason: "could run either", host: "upstream.test", path: "/graphql", port: e.port},
		{name: "GraphQL: document under application/graphql", send: post("/graphql", "Content-Type: application/graphql\r\n", "mutation { deleteRepo(id: 1) { id } }"),
			status: 415, rule: "body.ambiguous", reason: "not application/json", host: "upstream.test", path: "/graphql", port: e.port},
		{name: "GraphQL: mutation spelled with unicode escapes", send: post("/graphql", "Content-Type: application/json\r\n", `{"query":"\u006dutation { closeIssue(id: 1) { id } }"}`),
			status: 403, rule: "body.graphql-mutation", reason: "closeIssue", host: "upstream.test", path: "/graphql", port: e.port},
		{name: "GraphQL: batch of a query and a mutation", send: post("/graphql", "Content-Type: application/json\r\n", "["+gql("query { viewer { login } }")+","+gql("mutation { deleteRepo(id: 1) { id } }")+"]"),
			status: 403, rule: "body.graphql-mutation", reason: "batch call 1", host: "upstream.test", path: "/graphql", port: e.port},
	}
	// What passes reaches the real MCP server byte for byte, and its server-sent events
	// come back.
	escapedRead := toolCall(4, `get\u005fissue`, `{"id":7}`)
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`
	for _, p := range []struct{ name, body, rule, want string }{
		{"MCP: a read tool named with an escape passes byte for byte, answered as SSE", escapedRead, "body.mcp-read", "get_issue #7"},
		{"MCP: initialize answered with server-sent events passes through", initialize, "body.mcp-protocol", `"serverInfo"`},
	} {
		cases = append(cases, attack{name: p.name, status: 200, rule: p.rule, host: "upstream.test", path: "/mcp", port: e.port,
			send: func(t *testing.T, e *env) result {
				r := e.postRaw(t, "/mcp", jsonHeaders, p.body)
				if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") || !strings.Contains(r.body, "event: message") || !strings.Contains(r.body, p.want) {
					t.Errorf("response %q (%s), want server-sent events carrying %s", r.body, ct, p.want)
				}
				return r
			},
			upstream: func(t *testing.T, e *env, got []seen) {
				if len(got) != 1 || got[0].URI != "/mcp" || string(got[0].Body) != p.body {
					t.Errorf("upstream received %v, want exactly the bytes sent to /mcp", got)
				}
			}})
	}
	return cases
}
