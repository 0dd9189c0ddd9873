package bench

import "strings"

// Workload is what the load client asks for.
type Workload struct {
	ID     string // http-small, http-64k, https-small
	Scheme string
	Path   string
	Body   int64
	// Request, if set, is a JSON body POSTed with every request (otherwise each is a GET).
	Request string
}

// Workloads measured.
var (
	HTTPSmall  = Workload{ID: "http-small", Scheme: "http", Path: "/small", Body: SmallBody}
	HTTPLarge  = Workload{ID: "http-64k", Scheme: "http", Path: "/64k", Body: LargeBody}
	HTTPSSmall = Workload{ID: "https-small", Scheme: "https", Path: "/small", Body: SmallBody}
	// MCPCall and PostJSON POST the same ~1 KiB MCP tools/call: to a path the policy reads
	// bodies on (data.body_aware) and to one it does not.
	MCPCall  = Workload{ID: "mcp-1k", Scheme: "http", Path: "/mcp", Body: SmallBody, Request: MCPToolCall}
	PostJSON = Workload{ID: "post-1k", Scheme: "http", Path: "/post", Body: SmallBody, Request: MCPToolCall}
)

// MCPToolCall is a ~1 KiB MCP tools/call of a read tool.
var MCPToolCall = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_issues","arguments":{"repo":"acme/app","query":"is:open label:bug sort:updated-desc","fields":["title","state","labels","assignees","comments"],"limit":50,"note":"` +
	strings.Repeat("lorem ipsum dolor sit amet ", 32) + `"}}}`

// Row is one line of the table: a path (peer) under one workload.
type Row struct {
	Peer     string
	Workload Workload
	Label    string
}

// ID names the row for -rows and -profile: peer/workload.
func (r Row) ID() string { return r.Peer + "/" + r.Workload.ID }

// path is what the row requests: airlock with the shipped policy injects a credential,
// which the upstream's /cred paths check.
func (r Row) path() string {
	if r.Peer == PeerAirlockPolicy {
		return "/cred" + r.Workload.Path
	}
	return r.Workload.Path
}

// DefaultRows is the table the README shows. Every workload has a goproxy row, its baseline.
func DefaultRows() []Row {
	return []Row{
		{Peer: PeerDirect, Workload: HTTPSmall, Label: "direct (no proxy)"},
		{Peer: PeerGoproxy, Workload: HTTPSmall, Label: "plain goproxy (baseline)"},
		{Peer: PeerAirlockAllowAll, Workload: HTTPSmall, Label: "airlock, allow-all policy"},
		{Peer: PeerAirlockPolicy, Workload: HTTPSmall, Label: "airlock, shipped policy + credential"},
		{Peer: PeerSmokescreen, Workload: HTTPSmall, Label: "smokescreen v0.1.0"},
		{Peer: PeerSquid, Workload: HTTPSmall, Label: "squid"},

		{Peer: PeerDirect, Workload: HTTPLarge, Label: "direct (no proxy)"},
		{Peer: PeerGoproxy, Workload: HTTPLarge, Label: "plain goproxy (baseline)"},
		{Peer: PeerAirlockPolicy, Workload: HTTPLarge, Label: "airlock, shipped policy + credential"},
		{Peer: PeerSquid, Workload: HTTPLarge, Label: "squid"},

		{Peer: PeerDirect, Workload: HTTPSSmall, Label: "direct (no proxy)"},
		{Peer: PeerGoproxy, Workload: HTTPSSmall, Label: "plain goproxy, intercepting (baseline)"},
		{Peer: PeerAirlockPolicy, Workload: HTTPSSmall, Label: "airlock intercepting, shipped policy + credential"},

		{Peer: PeerAirlockBody, Workload: PostJSON, Label: "airlock, POST to a destination that is not body-aware"},
		{Peer: PeerAirlockBody, Workload: MCPCall, Label: "airlock, body-aware MCP tools/call (decided on its tool)"},
	}
}
