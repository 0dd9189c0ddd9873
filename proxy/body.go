package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/internal/jsondoc"
	"github.com/airlock-proxy/airlock/rego"
)

// BodyAwareness names the destinations whose request bodies the policy reads;
// *rego.Engine implements it (data.body_aware). Requests elsewhere are decided without
// their bodies, which are then never read before they are forwarded.
type BodyAwareness interface {
	BodyAware(host, path string) bool
}

var _ BodyAwareness = (*rego.Engine)(nil)

// bodyCall is what the policy sees of one call in a body-aware request: the whole body, or
// one element of a JSON-RPC (or GraphQL) batch, and its typed view.
type bodyCall struct {
	body    *jsondoc.Value
	mcp     *rego.MCPInput
	graphql *rego.GraphQLInput
}

// badBody is the refusal for a body-aware request whose body the policy cannot judge
// unambiguously.
func badBody(status int, reason string) *refusal {
	return &refusal{status: status, decision: event.DecisionDeny, rule: "body.ambiguous", class: "bad_request",
		reason: reason + "; this destination's requests are decided by what their bodies say, so only bodies that read one way are accepted"}
}

// readPolicyBody reads the body of a request to a body-aware destination, once and bounded,
// replaces r.Body with exactly those bytes (what is forwarded is what the policy judged) and
// returns what the policy sees of each call. A request without a body has no calls unless
// its URL holds a GraphQL query. Anything that two parsers could read differently is refused.
func (p *Proxy) readPolicyBody(r *http.Request, t target) ([]bodyCall, *refusal) {
	urlQuery, urlOpName, f := graphQLFromURL(t.query)
	if f != nil {
		return nil, f
	}
	body, f := p.readBounded(r)
	if f != nil {
		return nil, f
	}
	if len(body) == 0 {
		if urlQuery == "" {
			if urlOpName != "" {
				return nil, badBody(http.StatusBadRequest, "the URL names a GraphQL operationName but has no query")
			}
			return nil, nil
		}
		op, err := graphQLOperation(urlQuery, urlOpName)
		if err != nil {
			return nil, badBody(http.StatusBadRequest, err.Error())
		}
		return []bodyCall{{graphql: op}}, nil
	}
	if urlQuery != "" || urlOpName != "" {
		return nil, badBody(http.StatusBadRequest, "the request carries a body and a GraphQL query or operationName in its URL: the server could run either")
	}
	if ce := r.Header.Values("Content-Encoding"); len(ce) > 0 && !(len(ce) == 1 && strings.EqualFold(strings.TrimSpace(ce[0]), "identity")) {
		return nil, badBody(http.StatusUnsupportedMediaType, "the body is sent with Content-Encoding "+strconv.Quote(strings.Join(ce, ", "))+", which airlock does not decode: send it uncompressed")
	}
	if f := checkJSONType(r.Header.Values("Content-Type")); f != nil {
		return nil, f
	}
	doc, err := jsondoc.Parse(body, 0)
	if err != nil {
		return nil, badBody(http.StatusBadRequest, "the JSON body is refused: "+err.Error())
	}
	if doc.Kind != jsondoc.Array {
		c, f := viewOf(doc)
		if f != nil {
			return nil, f
		}
		return []bodyCall{c}, nil
	}
	if len(doc.Elems) == 0 {
		return nil, badBody(http.StatusBadRequest, "the body is an empty batch")
	}
	calls := make([]bodyCall, len(doc.Elems))
	for i := range doc.Elems {
		c, f := viewOf(&doc.Elems[i])
		if f != nil {
			f.reason = "batch element " + strconv.Itoa(i) + ": " + f.reason
			return nil, f
		}
		calls[i] = c
	}
	return calls, nil
}

// readBounded reads r's whole body, up to Limits.MaxPolicyBodyBytes, and puts exactly
// those bytes back as the body to forward.
func (p *Proxy) readBounded(r *http.Request) ([]byte, *refusal) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	max := p.opts.Limits.MaxPolicyBodyBytes
	tooLarge := &refusal{status: http.StatusRequestEntityTooLarge, decision: event.DecisionDeny, rule: "limits.policy_body", class: "limit",
		reason: "this destination's requests are decided by their bodies, which may be at most " + strconv.FormatInt(max, 10) + " bytes (limits.max_policy_body_bytes)"}
	if r.ContentLength > max {
		return nil, tooLarge
	}
	var body []byte
	var err error
	if r.ContentLength > 0 {
		// Known length: one exact read (the server's body reader stops at the length).
		body = make([]byte, r.ContentLength)
		_, err = io.ReadFull(r.Body, body)
	} else {
		var buf bytes.Buffer
		var n int64
		n, err = buf.ReadFrom(io.LimitReader(r.Body, max+1))
		if n > max {
			return nil, tooLarge
		}
		body = buf.Bytes()
	}
	if err != nil {
		return nil, &refusal{status: http.StatusBadRequest, decision: event.DecisionError, rule: "protocol", class: "bad_request",
			reason: "could not read the request body: " + err.Error()}
	}
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	if len(body) == 0 {
		r.Body = http.NoBody
	}
	return body, nil
}

// checkJSONType accepts exactly one Content-Type, application/json or a +json type, with no
// charset other than UTF-8: a body the server would read as something else is not judged
// as JSON.
func checkJSONType(values []string) *refusal {
	if len(values) != 1 {
		return badBody(http.StatusUnsupportedMediaType, "the body needs exactly one Content-Type: application/json")
	}
	mt, params, err := mime.ParseMediaType(values[0])
	if err != nil || mt != "application/json" && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")) {
		return badBody(http.StatusUnsupportedMediaType, "the body's Content-Type is "+strconv.Quote(values[0])+", not application/json")
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return badBody(http.StatusUnsupportedMediaType, "the Content-Type parameter "+k+"="+strconv.Quote(v)+" is not accepted (only charset=utf-8)")
		}
	}
	return nil
}

// graphQLFromURL reads a GraphQL query and operationName from the URL (GET requests).
// Either may appear at most once.
func graphQLFromURL(q []queryPair) (query, opName string, f *refusal) {
	var nq, nop int
	for _, kv := range q {
		switch kv.name {
		case "query":
			query, nq = kv.value, nq+1
		case "operationName":
			opName, nop = kv.value, nop+1
		}
	}
	if nq > 1 || nop > 1 {
		return "", "", badBody(http.StatusBadRequest, "the URL repeats query or operationName")
	}
	if !utf8.ValidString(query) || !utf8.ValidString(opName) {
		return "", "", badBody(http.StatusBadRequest, "the URL's GraphQL query is not valid UTF-8")
	}
	return query, opName, nil
}

// viewOf builds the typed view of one JSON value: a JSON-RPC 2.0 message (an object with
// "jsonrpc"), a GraphQL request (an object with "query"), or neither (body only).
func viewOf(v *jsondoc.Value) (bodyCall, *refusal) {
	c := bodyCall{body: v}
	if v.Kind != jsondoc.Object {
		return c, nil
	}
	// One object that reads as a JSON-RPC message and as a GraphQL request at once is refused:
	// a server of either kind acts on the half the other view would not show the policy. Keys
	// are compared ignoring case, as Go's encoding/json (and so many servers) reads them.
	if hasKeyFold(v, "jsonrpc") && (hasKeyFold(v, "query") || hasKeyFold(v, "operationName")) {
		return c, badBody(http.StatusBadRequest, `the body is both a JSON-RPC message ("jsonrpc") and a GraphQL request ("query" or "operationName"); send one or the other`)
	}
	if err := caseConfusable(v, "jsonrpc", "query", "operationName"); err != nil {
		return c, badBody(http.StatusBadRequest, err.Error())
	}
	if rpc := v.Get("jsonrpc"); rpc != nil {
		m, err := mcpView(v, rpc)
		if err != nil {
			return c, badBody(http.StatusBadRequest, err.Error())
		}
		c.mcp = m
		return c, nil
	}
	if q := v.Get("query"); q != nil {
		if err := caseConfusable(v, "query", "operationName"); err != nil {
			return c, badBody(http.StatusBadRequest, err.Error())
		}
		query, ok := q.String()
		if !ok {
			return c, badBody(http.StatusBadRequest, `the GraphQL "query" is not a string`)
		}
		var name string
		if n := v.Get("operationName"); n != nil && n.Kind != jsondoc.Null {
			if name, ok = n.String(); !ok {
				return c, badBody(http.StatusBadRequest, `the GraphQL "operationName" is not a string`)
			}
		}
		op, err := graphQLOperation(query, name)
		if err != nil {
			return c, badBody(http.StatusBadRequest, err.Error())
		}
		c.graphql = op
	}
	return c, nil
}

// mcpView reads a JSON-RPC 2.0 message. Fields a server relies on must have their types:
// "jsonrpc" is "2.0", "method" a string, "id" a string, number or null, and a tools/call's
// params an object whose "name" is a string and "arguments", if any, an object.
func mcpView(v, rpc *jsondoc.Value) (*rego.MCPInput, error) {
	if s, ok := rpc.String(); !ok || s != "2.0" {
		return nil, errors.New(`"jsonrpc" is not "2.0"`)
	}
	if err := caseConfusable(v, "jsonrpc", "method", "params", "id", "result", "error"); err != nil {
		return nil, err
	}
	m := &rego.MCPInput{}
	if meth := v.Get("method"); meth != nil {
		s, ok := meth.String()
		if !ok {
			return nil, errors.New(`the JSON-RPC "method" is not a string`)
		}
		m.Method = s
	}
	if id := v.Get("id"); id != nil {
		if id.Kind != jsondoc.String && id.Kind != jsondoc.Number && id.Kind != jsondoc.Null {
			return nil, errors.New(`the JSON-RPC "id" is not a string, number or null`)
		}
		m.ID = id
	}
	if m.Method != "tools/call" {
		return m, nil
	}
	params := v.Get("params")
	if params == nil || params.Kind != jsondoc.Object {
		return nil, errors.New(`a tools/call has no "params" object`)
	}
	if err := caseConfusable(params, "name", "arguments"); err != nil {
		return nil, err
	}
	name, ok := params.Get("name").String()
	if !ok {
		return nil, errors.New(`a tools/call's params.name is missing or not a string`)
	}
	m.Tool = name
	if args := params.Get("arguments"); args != nil && args.Kind != jsondoc.Null {
		if args.Kind != jsondoc.Object {
			return nil, errors.New(`a tools/call's params.arguments is not an object`)
		}
		m.Arguments = args
	}
	return m, nil
}

// approvalCall is how an approver sees one call and what the policy said of it.
func approvalCall(c bodyCall, d rego.Decision) approval.Call {
	out := approval.Call{Action: string(d.Action), Rule: d.Rule}
	if d.Denies() {
		out.Action = string(rego.ActionDeny)
	}
	switch {
	case c.mcp != nil:
		out.Kind = approval.CallMCP
		out.Method, out.Tool = c.mcp.Method, c.mcp.Tool
		if c.mcp.Arguments != nil {
			out.Arguments = json.RawMessage(c.mcp.Arguments.Raw)
		}
	case c.graphql != nil:
		out.Kind = approval.CallGraphQL
		out.OperationType, out.OperationName = string(c.graphql.OperationType), c.graphql.OperationName
		out.RootFields = c.graphql.RootFields
	default:
		out.Kind = approval.CallJSON
	}
	return out
}

// caseConfusable refuses an object with a key that matches one of names only when case is
// ignored ("Method", "NAME", "\u017Fuery" with a long s): Go's encoding/json matches struct
// fields that way, so a server could read a key the policy never looked at.
// hasKeyFold reports whether object v has a key equal to name ignoring case.
func hasKeyFold(v *jsondoc.Value, name string) bool {
	for _, k := range v.Keys {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

func caseConfusable(v *jsondoc.Value, names ...string) error {
	for _, k := range v.Keys {
		for _, n := range names {
			if k != n && strings.EqualFold(k, n) {
				return fmt.Errorf("the key %q differs from %q only in case, and servers may read it as that", k, n)
			}
		}
	}
	return nil
}
