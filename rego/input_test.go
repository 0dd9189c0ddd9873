package rego

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/util"
)

// The example input of docs/architecture.md, "The policy contract".
const designInput = `{
  "version": 1,
  "phase": "request",
  "sandbox": {"id": "sbx-7f3a", "labels": {"task": "release-triage", "tenant": "acme"}},
  "request": {
    "method": "POST", "scheme": "https", "host": "api.github.com", "port": 443,
    "path": "/repos/acme/app/issues", "query": {"state": ["open"]},
    "headers": {"content-type": ["application/json"]}
  }
}`

func TestParseInputJSON(t *testing.T) {
	in, err := ParseInputJSON([]byte(designInput))
	if err != nil {
		t.Fatalf("ParseInputJSON(design example): %v", err)
	}
	if in.Request.Host != "api.github.com" || in.Sandbox.Labels["tenant"] != "acme" || in.Request.Query["state"][0] != "open" {
		t.Errorf("parsed %+v", in)
	}
	for _, tc := range []struct{ name, input, want string }{
		{"unknown field", `{"version": 1, "phase": "connect", "request": {"method": "CONNECT", "host": "a", "port": 443, "hots": "b"}}`, `unknown field "hots"`},
		{"version", `{"version": 2, "phase": "connect", "request": {"method": "CONNECT", "host": "a", "port": 443}}`, "version is 2, want 1"},
		{"no version", `{"phase": "connect", "request": {"method": "CONNECT", "host": "a", "port": 443}}`, "version is 0"},
		{"phase", `{"version": 1, "phase": "response", "request": {"method": "GET", "host": "a", "port": 443}}`, `phase is "response"`},
		{"host", `{"version": 1, "phase": "request", "request": {"method": "GET", "port": 443}}`, "request.host is empty"},
		{"method", `{"version": 1, "phase": "request", "request": {"host": "a", "port": 443}}`, "request.method is empty"},
		{"port", `{"version": 1, "phase": "request", "request": {"method": "GET", "host": "a", "port": 70000}}`, "request.port is 70000"},
		{"trailing", `{"version": 1, "phase": "connect", "request": {"method": "CONNECT", "host": "a", "port": 1}} {}`, "after the JSON object"},
		{"not json", `version: 1`, "parse policy input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseInputJSON([]byte(tc.input))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// The AST input built directly equals the JSON form of Input that policies are written
// against (docs/architecture.md), so skipping the JSON round trip changes nothing for the policy.
func TestInputValueMatchesJSONForm(t *testing.T) {
	full, err := ParseInputJSON([]byte(designInput))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		in   *Input
	}{
		{"design example", full},
		{"connect", connectInput("github.com", 443)},
		{"request without query", requestInput("GET", "pypi.org", "/simple/")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			var generic any
			if err := util.UnmarshalJSON(b, &generic); err != nil {
				t.Fatal(err)
			}
			want := ast.MustInterfaceToValue(generic)
			if got := inputValue(tc.in, inputUse{query: true, headers: true}); got.Compare(want) != 0 {
				t.Errorf("inputValue:\n got %v\nwant %v", got, want)
			}
		})
	}
	// Labels are always an object, so that policies can read input.sandbox.labels.x.
	noLabels := connectInput("a", 443)
	noLabels.Sandbox.Labels = nil
	labels, err := inputValue(noLabels, inputUse{}).(ast.Object).Find(ast.Ref{ast.StringTerm("sandbox"), ast.StringTerm("labels")})
	if err != nil || labels.Compare(ast.NewObject()) != 0 {
		t.Errorf("labels of an unlabelled sandbox: %v, %v; want {}", labels, err)
	}
}

func TestDecideRejectsNilInput(t *testing.T) {
	e, err := New(context.Background(), Options{Timeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := e.Decide(context.Background(), nil); err == nil || !d.Denies() {
		t.Errorf("nil input: got %+v, %v; want a deny and an error", d, err)
	}
}

func FuzzParseInputJSON(f *testing.F) {
	f.Add([]byte(designInput))
	f.Add([]byte(`{"version": 1, "phase": "connect", "request": {"method": "CONNECT", "host": "a", "port": 443}}`))
	f.Add([]byte(`{"version": 1, "phase": "request", "request": {"method": "GET", "host": "a", "port": 1, "query": {"": [""]}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := ParseInputJSON(b)
		if err != nil {
			return
		}
		if err := in.Validate(); err != nil {
			t.Fatalf("parsed input fails Validate: %v", err)
		}
		if v := inputValue(in, inputUse{query: true, headers: true}); v == nil {
			t.Fatal("inputValue returned nil")
		}
	})
}

func TestInputUse(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       inputUse
	}{
		{"host only", `input.request.host == "a"`, inputUse{}},
		{"header", `input.request.headers["x-a"]`, inputUse{headers: true}},
		{"query parameter", `input.request.query.q`, inputUse{query: true, queryKeys: []string{"q"}}},
		{"query parameters", `input.request.query.q; input.request.query["a"][0] == "x"`, inputUse{query: true, queryKeys: []string{"a", "q"}}},
		{"query object", `count(input.request.query) > 1`, inputUse{query: true}},
		{"query object and a parameter", `input.request.query.q; is_object(input.request.query)`, inputUse{query: true}},
		{"query parameter by a variable", `some k; input.request.query[k] == ["x"]`, inputUse{query: true}},
		{"query parameter by a computed name", `input.request.query[concat("", ["a", "b"])]`, inputUse{query: true}},
		{"query bound", `q := input.request.query; q.a`, inputUse{query: true}},
		{"query under a variable top key", `some k; input[k].query.q`, inputUse{query: true, queryKeys: []string{"q"}}},
		{"whole request", `object.get(input.request, "headers", {})`, useAll},
		{"whole input", `is_object(input)`, useAll},
		{"variable key", `some k; input.request[k] == "x"`, useAll},
		{"body", `input.request.body.params.name == "x"`, inputUse{body: true}},
		{"mcp view only", `input.request.mcp.tool == "x"`, inputUse{}},
		{"mcp exists", `input.request.mcp`, inputUse{}},
		{"mcp absent", `not input.request.mcp`, inputUse{}},
		{"mcp arguments", `input.request.mcp.arguments.state == "closed"`, inputUse{mcpArgs: true}},
		{"mcp id", `input.request.mcp.id == 7`, inputUse{mcpID: true}},
		{"mcp variable key", `some k; input.request.mcp[k] == 7`, inputUse{mcpArgs: true, mcpID: true}},
		{"mcp object bound", `m := input.request.mcp; m.id == 7`, inputUse{mcpArgs: true, mcpID: true}},
		{"mcp object passed", `count(input.request.mcp) > 2`, inputUse{mcpArgs: true, mcpID: true}},
		{"mcp object compared", `input.request.mcp == {"method": "ping"}`, inputUse{mcpArgs: true, mcpID: true}},
		{"mcp under a variable key", `some k; input[k].mcp == {}`, inputUse{mcpArgs: true, mcpID: true}},
		{"variable top key", `some k; input[k].headers`, inputUse{headers: true}},
		{"sandbox only", `input.sandbox.labels.x == "y"`, inputUse{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ast.NewCompiler()
			c.Compile(map[string]*ast.Module{"p.rego": ast.MustParseModule("package airlock\n\ndecision := {\"action\": \"allow\"} if {\n" + tc.body + "\n}\n")})
			if c.Failed() {
				t.Fatal(c.Errors)
			}
			if got := inputUseOf(c); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	// An import is resolved into a reference too.
	c := ast.NewCompiler()
	c.Compile(map[string]*ast.Module{"p.rego": ast.MustParseModule("package airlock\n\nimport input.request as r\n\ndecision := {\"action\": \"allow\"} if r.headers.a\n")})
	if got := inputUseOf(c); !got.headers {
		t.Errorf("import input.request: got %+v, want headers used", got)
	}
	// The shipped rules decide MCP calls on the method and tool: arguments and id stay out of
	// their input, so calls that differ only in their JSON-RPC id share a cache entry.
	e, err := New(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.cur.Load().use; got.mcpArgs || got.mcpID || got.body {
		t.Errorf("shipped policy: got %+v, want neither body, mcp arguments nor mcp id read", got)
	}
}

// A policy that reads headers sees them; the shipped one does not read them.
func TestDecideSeesHeadersWhenUsed(t *testing.T) {
	e := newTestEngine(t, map[string]string{"p.rego": `package airlock

decision := {"action": "allow", "rule": "h.ok"} if "yes" in input.request.headers["x-ok"]

else := {"action": "deny", "rule": "h.no"}
`}, Options{})
	in := requestInput("GET", "a.example", "/")
	in.Request.Headers = map[string][]string{"x-ok": {"yes"}}
	if d, err := e.Decide(context.Background(), in); err != nil || d.Rule != "h.ok" {
		t.Errorf("got %+v, %v; want h.ok", d, err)
	}
	shipped, err := New(context.Background(), Options{Timeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if u := shipped.cur.Load().use; u.headers || !u.query {
		t.Errorf("shipped policy input use %+v, want query only", u)
	}
}
