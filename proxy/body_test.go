package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	gqlast "github.com/vektah/gqlparser/v2/ast"
	gqlparser "github.com/vektah/gqlparser/v2/parser"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// bodyPolicy reads bodies on /mcp and /graphql of 127.0.0.1 (data.body_aware): MCP protocol
// messages and the read tool get_issue are allowed, drop_database is denied, any other tool
// is held; GraphQL queries are allowed and mutations denied. /plain is not body-aware.
const bodyPolicy = `package airlock

decision := d if {
	d := min(deny)
} else := d if {
	d := min(approve)
} else := d if {
	d := min(allow)
} else := {"action": "deny", "rule": "t.default", "reason": "not allowed"}

allow contains {"action": "allow", "rule": "t.connect"} if input.phase == "connect"

allow contains {"action": "allow", "rule": "t.plain"} if input.request.path == "/plain"

allow contains {"action": "allow", "rule": "mcp.session"} if {
	input.request.path == "/mcp"
	input.request.method in {"GET", "DELETE"}
}

allow contains {"action": "allow", "rule": "mcp.protocol"} if {
	input.request.method == "POST"
	input.request.mcp
	not input.request.mcp.method == "tools/call"
}

allow contains {"action": "allow", "rule": "mcp.read"} if input.request.mcp.tool == "get_issue"

approve contains {"action": "approve", "rule": "mcp.write", "reason": concat(" ", ["tool", input.request.mcp.tool, "needs a human"])} if {
	input.request.mcp.method == "tools/call"
	not input.request.mcp.tool in {"get_issue", "drop_database"}
}

deny contains {"action": "deny", "rule": "mcp.forbidden", "reason": "never"} if input.request.mcp.tool == "drop_database"

allow contains {"action": "allow", "rule": "graphql.query"} if input.request.graphql.operation_type == "query"

deny contains {"action": "deny", "rule": "graphql.mutation", "reason": concat(",", input.request.graphql.root_fields)} if {
	input.request.graphql.operation_type == "mutation"
}
`

const bodyData = `{"body_aware": {"127.0.0.1": ["/mcp", "/graphql"]}}`

// bodyEnv is a proxy with bodyPolicy in front of a real MCP server (the official Go SDK,
// streamable HTTP) and a GraphQL endpoint, both recording the exact bytes they received.
type bodyEnv struct {
	*env
	approvals *approval.Service
	upURL     string

	mu       sync.Mutex
	received [][]byte // bodies of POSTs to /mcp and /graphql, as the upstream read them
}

func (b *bodyEnv) got() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([][]byte(nil), b.received...)
}

func newMCPServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "issues", Version: "1.0.0"}, nil)
	type issueArgs struct {
		ID    int    `json:"id"`
		State string `json:"state,omitempty"`
	}
	tool := func(name string) {
		mcp.AddTool(s, &mcp.Tool{Name: name, Description: name + " an issue"},
			func(ctx context.Context, req *mcp.CallToolRequest, in issueArgs) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s #%d %s done", name, in.ID, in.State)}}}, nil, nil
			})
	}
	tool("get_issue")
	tool("update_issue")
	tool("drop_database")
	return s
}

func newBodyEnv(t *testing.T, opts ...envOpt) *bodyEnv {
	t.Helper()
	be := &bodyEnv{approvals: approvals(t, approval.Config{Timeout: approval.Duration(30 * time.Second)})}
	srv := newMCPServer()
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			be.mu.Lock()
			be.received = append(be.received, b)
			be.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		switch r.URL.Path {
		case "/mcp":
			mcpHandler.ServeHTTP(w, r)
		case "/graphql":
			serveGraphQL(w, r)
		default:
			fmt.Fprintf(w, "plain %s", r.Method)
		}
	}))
	t.Cleanup(up.Close)
	be.upURL = up.URL
	be.env = &env{upstream: make(chan *http.Request, 100)}
	be.start(t, Options{Decider: e2etest.EngineWith(t, rego.Options{}, bodyPolicy, bodyData), Approver: be.approvals}, opts)
	return be
}

// serveGraphQL answers a GraphQL request with the root fields of its operation, parsed
// with the same library's parser as a Go GraphQL server would.
func serveGraphQL(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Query         string `json:"query"`
		OperationName string `json:"operationName"`
	}
	if r.Method == http.MethodGet {
		req.Query, req.OperationName = r.URL.Query().Get("query"), r.URL.Query().Get("operationName")
	} else if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	doc, err := gqlparser.ParseQuery(&gqlast.Source{Input: req.Query})
	if err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	op := doc.Operations.ForName(req.OperationName)
	if op == nil {
		http.Error(w, "no operation", 400)
		return
	}
	fmt.Fprintf(w, `{"data":{"ran":%q}}`, op.Operation)
}

func post(t *testing.T, c *http.Client, u, ctype, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header, string(b)
}

// TestMCPClientThroughProxy: the SDK's own client talks to the SDK's server through airlock:
// the session opens (initialize, the standalone SSE stream), a read tool passes, a write
// tool is held and the approver sees the tool and its arguments, and a denied tool fails
// with the rule that denied it. Responses come back as server-sent events.
func TestMCPClientThroughProxy(t *testing.T) {
	be := newBodyEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1.0.0"}, nil)
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: be.upURL + "/mcp", HTTPClient: be.client(nil), MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect through airlock: %v", err)
	}
	defer sess.Close()
	tools, err := sess.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 3 {
		t.Fatalf("tools/list: %v, %v", tools, err)
	}
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "get_issue", Arguments: map[string]any{"id": 7}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "get_issue #7  done" {
		t.Fatalf("get_issue: %+v, %v", res, err)
	}

	type result struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "update_issue", Arguments: map[string]any{"id": 12, "state": "closed"}})
		done <- result{r, err}
	}()
	rec := waitPending(t, be.approvals, 1)[0]
	if len(rec.Calls) != 1 || rec.Calls[0].Tool != "update_issue" || rec.Calls[0].Method != "tools/call" ||
		rec.Calls[0].Kind != approval.CallMCP || rec.Calls[0].Action != "approve" || rec.Calls[0].Rule != "mcp.write" {
		t.Fatalf("approval record calls = %+v, want one tools/call update_issue held by mcp.write", rec.Calls)
	}
	var args map[string]any
	if err := json.Unmarshal(rec.Calls[0].Arguments, &args); err != nil || args["id"] != 12.0 || args["state"] != "closed" {
		t.Fatalf("approval shows arguments %s, want id 12 and state closed", rec.Calls[0].Arguments)
	}
	if _, err := be.approvals.Decide(context.Background(), rec.ID, approval.StateApproved, "oncall", ""); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.res.IsError || !strings.Contains(r.res.Content[0].(*mcp.TextContent).Text, "update_issue #12 closed") {
		t.Fatalf("approved update_issue: %+v, %v", r.res, r.err)
	}
	approvedSeen := false
	for _, b := range be.got() {
		sum := sha256.Sum256(b)
		approvedSeen = approvedSeen || hex.EncodeToString(sum[:]) == rec.BodySHA256
	}
	if !approvedSeen {
		t.Errorf("the upstream never received the approved body (sha256 %s)", rec.BodySHA256)
	}

	_, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "drop_database", Arguments: map[string]any{"id": 1}})
	if err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("drop_database: err %v, want a 403 refusal", err)
	}
	for _, b := range be.got() {
		if bytes.Contains(b, []byte("drop_database")) && bytes.Contains(b, []byte("tools/call")) {
			t.Fatalf("the denied call reached the upstream: %s", b)
		}
	}
}

func containsBytes(list [][]byte, b []byte) bool {
	for _, x := range list {
		if bytes.Equal(x, b) {
			return true
		}
	}
	return false
}

// TestBodyAwareDecisions: what the policy decides from bodies, with the exact bytes sent
// upstream when allowed and nothing sent otherwise.
func TestBodyAwareDecisions(t *testing.T) {
	be := newBodyEnv(t)
	c := be.client(nil)
	call := func(id int, tool string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"id":1}}}`, id, tool)
	}
	tests := []struct {
		name, path, ctype, body string
		status                  int
		rule                    string // X-Airlock-Rule of a refusal
		reason                  string // in the refusal's body
	}{
		{"read tool", "/mcp", "application/json", call(1, "get_issue"), 0, "", ""},
		{"denied tool", "/mcp", "application/json", call(1, "drop_database"), 403, "mcp.forbidden", ""},
		{"unicode escape in tool name", "/mcp", "application/json",
			`{"jsonrpc":"2.0","id":1,"method":"tools\u002fcall","params":{"name":"drop\u005fdatabase","arguments":{}}}`, 403, "mcp.forbidden", ""},
		{"batch of reads", "/mcp", "application/json", "[" + call(1, "get_issue") + "," + call(2, "get_issue") + "]", 0, "", ""},
		{"batch mixing a read and a denied write", "/mcp", "application/json", "[" + call(1, "get_issue") + "," + call(2, "drop_database") + "]",
			403, "mcp.forbidden", "batch call 1 (tools/call drop_database)"},
		{"graphql query with alias, fragment and comment", "/graphql", "application/json",
			`{"query":"# mutation {x}\nquery Q { a: viewer { login } ...F }\nfragment F on Query { repository(name: \"mutation\") { id } }","operationName":"Q"}`, 200, "", ""},
		{"graphql mutation behind a fragment on the root", "/graphql", "application/json",
			`{"query":"mutation M { ...F }\nfragment F on Mutation { closeIssue: deleteRepo(id: 1) { id } }"}`, 403, "graphql.mutation", "deleteRepo"},
		{"graphql mutation named by unicode escapes", "/graphql", "application/json",
			`{"query":"\u006dutation { closeIssue(id: 1) { id } }"}`, 403, "graphql.mutation", "closeIssue"},
		{"graphql block string hiding nothing", "/graphql", "application/json",
			`{"query":"query { search(q: \"\"\"mutation { x }\"\"\") { id } }"}`, 200, "", ""},
		// Ambiguous bodies are refused.
		{"duplicate keys", "/mcp", "application/json",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue","name":"drop_database"}}`, 400, "body.ambiguous", "duplicate object key"},
		{"duplicate keys by escape", "/mcp", "application/json",
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue","n\u0061me":"drop_database"}}`, 400, "body.ambiguous", "duplicate"},
		{"invalid utf-8", "/mcp", "application/json", "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"get_issue\xff\"}}", 400, "body.ambiguous", "UTF-8"},
		{"lone surrogate", "/mcp", "application/json", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue\ud800"}}`, 400, "body.ambiguous", "surrogate"},
		{"json under text/plain", "/mcp", "text/plain", call(1, "get_issue"), 415, "body.ambiguous", "not application/json"},
		{"json under a form type", "/mcp", "application/x-www-form-urlencoded", call(1, "get_issue"), 415, "body.ambiguous", ""},
		{"no content type", "/mcp", "", call(1, "get_issue"), 415, "body.ambiguous", ""},
		{"utf-16 charset", "/mcp", "application/json; charset=utf-16", call(1, "get_issue"), 415, "body.ambiguous", "charset"},
		{"two operations, no name", "/graphql", "application/json", `{"query":"query A { a } mutation B { b }"}`, 400, "body.ambiguous", "several operations"},
		{"unknown operation name", "/graphql", "application/json", `{"query":"query A { a }","operationName":"B"}`, 400, "body.ambiguous", "no operation named"},
		{"jsonrpc not 2.0", "/mcp", "application/json", `{"jsonrpc":"1.0","id":1,"method":"tools/call"}`, 400, "body.ambiguous", "2.0"},
		{"tool name not a string", "/mcp", "application/json", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["drop_database"]}}`, 400, "body.ambiguous", "params.name"},
		{"empty batch", "/mcp", "application/json", `[]`, 400, "body.ambiguous", "empty batch"},
		{"trailing data", "/mcp", "application/json", call(1, "get_issue") + call(2, "drop_database"), 400, "body.ambiguous", "after the JSON value"},
		// One object read as two kinds of request (found by an attack: the policy saw an MCP
		// ping, a GraphQL server ran the mutation).
		{"json-rpc ping carrying a graphql mutation", "/graphql", "application/json",
			`{"jsonrpc":"2.0","id":1,"method":"ping","query":"mutation M { deleteRepo(id: 1) { id } }"}`, 400, "body.ambiguous", "both a JSON-RPC message"},
		{"json-rpc ping carrying a Query in another case", "/graphql", "application/json",
			`{"jsonrpc":"2.0","id":1,"method":"ping","Query":"mutation M { deleteRepo(id: 1) { id } }"}`, 400, "body.ambiguous", "both a JSON-RPC message"},
		{"graphql query with a JSONRPC key in another case", "/mcp", "application/json",
			`{"JSONRPC":"2.0","id":1,"method":"tools/call","params":{"name":"drop_database"},"query":"query { a }"}`, 400, "body.ambiguous", "both a JSON-RPC message"},
		{"json-rpc with an operationName", "/graphql", "application/json",
			`{"jsonrpc":"2.0","id":1,"method":"ping","operationName":"M"}`, 400, "body.ambiguous", "both a JSON-RPC message"},
		{"batch whose second element mixes the two", "/graphql", "application/json",
			`[{"query":"query { a }"},{"jsonrpc":"2.0","id":2,"method":"ping","query":"mutation { deleteRepo(id: 1) { id } }"}]`, 400, "body.ambiguous", "both a JSON-RPC message"},
		{"jsonrpc key in another case alone", "/mcp", "application/json",
			`{"JsonRpc":"2.0","id":1,"method":"tools/call","params":{"name":"drop_database"}}`, 400, "body.ambiguous", "only in case"},
		// Not body-aware: the body is not read, whatever it holds.
		{"other path", "/plain", "text/plain", "{\"a\":1,\"a\":\xff}", 200, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(be.got())
			status, hdr, body := post(t, c, be.upURL+tc.path, tc.ctype, tc.body)
			if tc.status == 0 {
				tc.status = 200
			}
			if status != tc.status {
				t.Fatalf("status %d, want %d (%s)", status, tc.status, body)
			}
			if tc.status >= 400 {
				if got := hdr.Get("X-Airlock-Rule"); got != tc.rule {
					t.Errorf("X-Airlock-Rule = %q, want %q", got, tc.rule)
				}
				if !strings.Contains(body, tc.reason) {
					t.Errorf("refusal %q does not say %q", body, tc.reason)
				}
				if len(be.got()) != before {
					t.Errorf("a refused request reached the upstream: %s", be.got()[before:])
				}
				return
			}
			if got := be.got(); len(got) != before+1 || string(got[before]) != tc.body {
				t.Errorf("upstream received %q, want exactly the bytes sent", got[before:])
			}
		})
	}
}

// TestBodyAwareTransport: refusals of what the proxy cannot read the way the upstream would
// (encodings, sizes, a query both in the URL and the body), GraphQL over GET, and an SSE
// response passing through.
func TestBodyAwareTransport(t *testing.T) {
	be := newBodyEnv(t, func(o *Options) { o.Limits.MaxPolicyBodyBytes = 4096 })
	c := be.client(nil)
	read := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue","arguments":{"id":3}}}`

	if st, hdr, body := post(t, c, be.upURL+"/mcp", "application/json", read, "Content-Encoding", "gzip"); st != 415 || hdr.Get("X-Airlock-Rule") != "body.ambiguous" || !strings.Contains(body, "Content-Encoding") {
		t.Errorf("gzip body: %d %q", st, body)
	}
	big := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue","arguments":{"pad":"` + strings.Repeat("x", 5000) + `"}}}`
	if st, hdr, body := post(t, c, be.upURL+"/mcp", "application/json", big); st != 413 || hdr.Get("X-Airlock-Rule") != "limits.policy_body" {
		t.Errorf("body over the bound: %d %q", st, body)
	}
	// Chunked (no Content-Length) over the bound as well.
	req, _ := http.NewRequest(http.MethodPost, be.upURL+"/mcp", io.MultiReader(strings.NewReader(big)))
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = -1
	if resp, err := c.Do(req); err != nil || resp.StatusCode != 413 {
		t.Errorf("chunked body over the bound: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if st, _, body := post(t, c, be.upURL+"/graphql?query="+url.QueryEscape("mutation { x }"), "application/json", `{"query":"query { a }"}`); st != 400 || !strings.Contains(body, "could run either") {
		t.Errorf("query in URL and body: %d %q", st, body)
	}

	for _, tc := range []struct {
		query  string
		status int
	}{
		{"query Q { viewer { login } }", 200},
		{"mutation { deleteRepo(id: 1) { id } }", 403},
		{"query A { a } query B { b }", 400},
	} {
		resp, body := get(t, c, http.MethodGet, be.upURL+"/graphql?query="+url.QueryEscape(tc.query), "")
		if resp.StatusCode != tc.status {
			t.Errorf("GET ?query=%q: %d, want %d (%s)", tc.query, resp.StatusCode, tc.status, body)
		}
	}
	if resp, _ := get(t, c, http.MethodGet, be.upURL+"/graphql?query=a&query=b", ""); resp.StatusCode != 400 {
		t.Errorf("repeated ?query=: %d, want 400", resp.StatusCode)
	}

	// The SDK server answers a request with an SSE stream unless told otherwise; it passes.
	initBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`
	st, hdr, body := post(t, c, be.upURL+"/mcp", "application/json", initBody)
	if st != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") || !strings.Contains(body, "event: message") || !strings.Contains(body, `"serverInfo"`) {
		t.Errorf("initialize: %d %q %q, want an SSE response carrying the result", st, hdr.Get("Content-Type"), body)
	}
}

// TestBatchHeldShowsEveryCall: a batch mixing a read and a write is held once; the approver
// sees both calls with the policy's decision on each, and the approved bytes are what the
// upstream receives.
func TestBatchHeldShowsEveryCall(t *testing.T) {
	be := newBodyEnv(t)
	c := be.client(nil)
	batch := `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue","arguments":{"id":1}}},` +
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"update_issue","arguments":{"id":2,"state":"closed"}}}]`
	req, _ := http.NewRequest(http.MethodPost, be.upURL+"/mcp", strings.NewReader(batch))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	ch := send(c, req)
	rec := waitPending(t, be.approvals, 1)[0]
	if len(rec.Calls) != 2 || rec.Calls[0].Action != "allow" || rec.Calls[0].Tool != "get_issue" ||
		rec.Calls[1].Action != "approve" || rec.Calls[1].Tool != "update_issue" {
		t.Fatalf("calls = %+v, want get_issue allowed and update_issue held", rec.Calls)
	}
	if !strings.Contains(rec.Reason, "batch call 1 (tools/call update_issue)") {
		t.Errorf("reason %q does not name the held call", rec.Reason)
	}
	if _, err := be.approvals.Decide(context.Background(), rec.ID, approval.StateApproved, "oncall", ""); err != nil {
		t.Fatal(err)
	}
	wait(t, ch)
	if !containsBytes(be.got(), []byte(batch)) {
		t.Errorf("the upstream did not receive the approved batch byte for byte")
	}
}
