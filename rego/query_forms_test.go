package rego

import (
	"context"
	"testing"

	orego "github.com/open-policy-agent/opa/v1/rego"
)

// Red team: forms of reading the query, each as a policy whose decision echoes what it read.
// The engine (input built for the parameters the policy reads, decisions cached by them)
// must decide as OPA does on the whole input, for queries that differ in read and unread
// parameters; only the forms that name a parameter by a constant may narrow the query.
var queryForms = []struct{ name, mod string }{
	{"import alias q.page", "import input.request.query as q\n_v := q.page"},
	{"import alias q[k]", "import input.request.query as q\n_v := [k | some k, _ in q]"},
	{"query[k]", "_v := [k | some k; input.request.query[k]]"},
	{"query[_]", "_v := [x | x := input.request.query[_]]"},
	{"object.keys", "_v := object.keys(input.request.query)"},
	{"json.marshal input", "_v := json.marshal(input)"},
	{"json.marshal query", "_v := json.marshal(input.request.query)"},
	{"walk input", "_v := [p | walk(input, [p, _])]"},
	{"some k,v in", "_v := {k | some k, _ in input.request.query}"},
	{"func of query", "f(q) := q.page\n_v := f(input.request.query)"},
	{"func of request", "f(r) := r.query.page\n_v := f(input.request)"},
	{"func of input", "f(i) := i.request.query.page\n_v := f(input)"},
	{"other package", "_v := data.other.p.page"},
	{"every", "default _v := false\n_v := true if { every k, _ in input.request.query { k != \"page\" } }"},
	{"unify input", "_v := q.page if { {\"request\": {\"query\": q}} = input }"},
	{"array of input", "_v := x[0].request.query.page if { x := [input] }"},
	{"object of input", "_v := x.a.request.query.page if { x := {\"a\": input} }"},
	{"set of input", "_v := [y.request.query.page | some y in {input}]"},
	{"bound request", "_v := r.query.page if { r := input.request }"},
	{"object.get", "_v := object.get(input.request.query, \"page\", \"none\")"},
	{"object.get path", "_v := object.get(input, [\"request\", \"query\", \"page\"], \"none\")"},
	{"count", "_v := count(input.request.query)"},
	{"object.filter", "_v := object.filter(input.request.query, [\"page\"])"},
	{"computed key", "_v := input.request.query[lower(\"PAGE\")]"},
	{"rule const key", "_k := \"page\"\n_v := input.request.query[_k]"},
	{"local const key", "_v := input.request.query[k] if { k := \"page\" }"},
	{"partial object", "p[k] := v if { some k, v in input.request.query }\n_v := p.page"},
	{"with request", "g := input.request.query.service\n_v := y if { y := data.airlock.g with input.request as {\"query\": {\"service\": input.request.query.page}} }"},
	{"with input", "g := input.request.query.service\n_v := y if { y := data.airlock.g with input as {\"request\": {\"query\": {\"service\": input.request.query.page}}} }"},
	{"with query.service", "g := object.keys(input.request.query)\n_v := y if { y := data.airlock.g with input.request.query.service as [\"z\"] }"},
	{"with query.service 2", "g := input.request.query.page\n_v := y if { y := data.airlock.g with input.request.query.service as [\"z\"] }"},
	{"nested ref key", "_v := input.request.query[input.request.query.service[0]]"},
	{"template", "_v := sprintf(\"%v\", [input.request.query])"},
	{"union", "_v := object.union(input.request, {}).query.page"},
	{"is_object query", "_v := is_object(input.request.query)"},
	{"query exists", "default _v := false\n_v := true if input.request.query"},
	{"not query", "default _v := false\n_v := true if not input.request.query"},
	{"data with input", "g := data.x.query.page\n_v := y if { y := data.airlock.g with data.x as input.request }"},
	{"ref head rule", "q.page := input.request.query.page\n_v := q"},
	{"some in values", "_v := [v | some v in input.request.query]"},
	{"json.patch", "_v := json.patch(input, [])"},
	{"yaml", "_v := yaml.marshal(input.request)"},
	{"print", "_v := x if { x := input; print(x) }"},
	{"query.service", "_v := input.request.query.service"},
	{"query.service idx", "_v := input.request.query.service[0]"},
}

const queryFormsOther = "package other\n\np := input.request.query\n"

func queryFormsInput(q map[string][]string) *Input {
	in := requestInput("GET", "github.com", "/a/b.git/info/refs")
	in.Request.Query = q
	return in
}

// queryFormsWant is the rule OPA decides on the whole input.
func queryFormsWant(t *testing.T, mod string, in *Input) string {
	t.Helper()
	r := orego.New(
		orego.Module("p.rego", mod), orego.Module("o.rego", queryFormsOther),
		orego.Query("x := data.airlock.decision.rule"),
		orego.ParsedInput(inputValue(in, useAll)),
	)
	rs, err := r.Eval(context.Background())
	if err != nil {
		return "ERR " + err.Error()
	}
	if len(rs) == 0 {
		return "<undefined>"
	}
	return rs[0].Bindings["x"].(string)
}

func TestQueryFormsSeeTheQuerySent(t *testing.T) {
	qs := []map[string][]string{
		{"service": {"git-upload-pack"}, "page": {"1"}},
		{"service": {"git-upload-pack"}, "page": {"2"}},
		{"page": {"1"}},
		{"service": {"git-upload-pack"}},
		nil,
		{"page": {"1"}, "Service": {"git-receive-pack"}},
		{"service": {"page"}, "page": {"3"}},
		{"service": {"page"}, "page": {"1"}},
	}
	for _, tc := range queryForms {
		mod := "package airlock\n\n" + tc.mod + "\n\ndecision := {\"action\": \"allow\", \"rule\": sprintf(\"%v\", [_v])}\n_has if { _v = _ }\ndecision := {\"action\": \"allow\", \"rule\": \"<undefined>\"} if not _has\n"
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{"p.rego": mod}
			if tc.name == "other package" {
				files["o.rego"] = queryFormsOther
			}
			e := newTestEngine(t, files, Options{})
			use := e.cur.Load().use
			t.Logf("keys=%q nil=%v", use.queryKeys, use.queryKeys == nil)
			for round := range 2 {
				for _, q := range qs {
					in := queryFormsInput(q)
					want := queryFormsWant(t, mod, in)
					d, err := e.Decide(context.Background(), in)
					got := d.Rule
					if err != nil {
						got = "ERR " + err.Error()
					}
					if got != want {
						t.Errorf("round %d q=%v keys=%q nil=%v: engine %q, full input %q", round, q, use.queryKeys, use.queryKeys == nil, got, want)
					}
				}
			}
		})
	}
}
