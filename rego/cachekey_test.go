package rego

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"testing/quick"

	"github.com/airlock-proxy/airlock/internal/jsondoc"
)

func mustJSON(t testing.TB, s string) *jsondoc.Value {
	t.Helper()
	v, err := jsondoc.Parse([]byte(s), 0)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// confusable are pairs of inputs the policy sees differently whose fields hold the bytes a
// separator-joined key would use: each pair must get two keys.
var confusable = []struct {
	name string
	a, b func(*Input)
}{
	{"query value holding a second pair",
		func(in *Input) { in.Request.Query = map[string][]string{"a": {"1\x03force\x04true"}} },
		func(in *Input) { in.Request.Query = map[string][]string{"a": {"1"}, "force": {"true"}} }},
	{"query value holding a second value",
		func(in *Input) { in.Request.Query = map[string][]string{"a": {"x\x04y"}} },
		func(in *Input) { in.Request.Query = map[string][]string{"a": {"x", "y"}} }},
	{"query name holding a value",
		func(in *Input) { in.Request.Query = map[string][]string{"a\x04b": nil} },
		func(in *Input) { in.Request.Query = map[string][]string{"a": {"b"}} }},
	{"query name holding a pair",
		func(in *Input) { in.Request.Query = map[string][]string{"a\x00": {"1"}} },
		func(in *Input) { in.Request.Query = map[string][]string{"a": {"\x001"}} }},
	{"label value holding a second label",
		func(in *Input) { in.Sandbox.Labels = map[string]string{"team": "blue\x01admin\x02yes"} },
		func(in *Input) { in.Sandbox.Labels = map[string]string{"team": "blue", "admin": "yes"} }},
	{"sandbox id holding the method",
		func(in *Input) { in.Sandbox.ID, in.Request.Method = "s\x00GET", "POST" },
		func(in *Input) { in.Sandbox.ID, in.Request.Method = "s", "GET\x00POST" }},
	{"host holding the path",
		func(in *Input) { in.Request.Host, in.Request.Path = "a.example\x00/x", "/y" },
		func(in *Input) { in.Request.Host, in.Request.Path = "a.example", "/x\x00/y" }},
	{"empty value and no value",
		func(in *Input) { in.Request.Query = map[string][]string{"a": {""}} },
		func(in *Input) { in.Request.Query = map[string][]string{"a": nil} }},
	{"two values and one holding both",
		func(in *Input) { in.Request.Query = map[string][]string{"a": {"", ""}} },
		func(in *Input) { in.Request.Query = map[string][]string{"a": {""}} }},
	{"mcp tool holding the arguments",
		func(in *Input) { in.Request.MCP = &MCPInput{Tool: "a\x01{}"} },
		func(in *Input) {
			in.Request.MCP = &MCPInput{Tool: "a", Arguments: &jsondoc.Value{Kind: jsondoc.Object, Raw: []byte("{}")}}
		}},
	{"no mcp and an empty one",
		func(in *Input) { in.Request.MCP = nil },
		func(in *Input) { in.Request.MCP = &MCPInput{} }},
	{"root field holding a second field",
		func(in *Input) {
			in.Request.GraphQL = &GraphQLInput{OperationType: "query", RootFields: []string{"a\x01b"}}
		},
		func(in *Input) {
			in.Request.GraphQL = &GraphQLInput{OperationType: "query", RootFields: []string{"a", "b"}}
		}},
	{"scheme and method swapped",
		func(in *Input) { in.Request.Method, in.Request.Scheme = "GET", "" },
		func(in *Input) { in.Request.Method, in.Request.Scheme = "", "GET" }},
}

func keyInput() *Input {
	return &Input{Version: 1, Phase: PhaseRequest, Sandbox: SandboxInput{ID: "s"},
		Request: RequestInput{Method: "GET", Scheme: "https", Host: "a.example", Port: 443, Path: "/"}}
}

func TestCacheKeySeparatesConfusableInputs(t *testing.T) {
	dc := &decisionCache{use: inputUse{query: true}}
	for _, tt := range confusable {
		a, b := keyInput(), keyInput()
		tt.a(a)
		tt.b(b)
		if inputValue(a, dc.use).Compare(inputValue(b, dc.use)) == 0 {
			t.Fatalf("%s: the two inputs are the same document; the case tests nothing", tt.name)
		}
		if dc.key(a) == dc.key(b) {
			t.Errorf("%s: %+v and %+v share a cache key", tt.name, a.Request, b.Request)
		}
	}
}

// TestDecisionCacheForcePairAttack is the attack that once bypassed the policy: a request whose query value holds
// the key's separators and "force", allowed and cached, must not answer for a request that
// really carries force=true, whether the policy denies it or holds it for approval.
func TestDecisionCacheForcePairAttack(t *testing.T) {
	for _, action := range []Action{ActionDeny, ActionApprove} {
		t.Run(string(action), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"p.rego": `package airlock
default decision := {"action": "allow", "rule": "open"}
decision := {"action": "` + string(action) + `", "rule": "force"} if "force" in object.keys(input.request.query)`})
			e, err := New(ctx, Options{Dir: dir, Timeout: testEvalTimeout})
			if err != nil {
				t.Fatal(err)
			}
			if e.cur.Load().cache == nil {
				t.Fatal("the policy is not cached; the test would not test the cache")
			}
			in := func(q map[string][]string) *Input {
				in := keyInput()
				in.Request.Method, in.Request.Query = "POST", q
				return in
			}
			for round := range 2 {
				if d, err := e.Decide(ctx, in(map[string][]string{"a": {"1\x03force\x04true"}})); err != nil || d.Action != ActionAllow {
					t.Fatalf("round %d, force inside a value: %+v, %v; want allow", round, d, err)
				}
				if d, err := e.Decide(ctx, in(map[string][]string{"a": {"1"}, "force": {"true"}})); err != nil || d.Action != action {
					t.Fatalf("round %d, force=true: %+v, %v; want %s", round, d, err, action)
				}
			}
		})
	}
}

// TestCacheKeyCoversEveryInputField changes every field of Input in turn: whenever the
// policy's document changes, the key must change. A field added to Input and to inputValue
// but not to canonicalInput fails here; a field of a kind this test cannot vary fails too,
// so that whoever adds it extends the test.
func TestCacheKeyCoversEveryInputField(t *testing.T) {
	for _, use := range []inputUse{useAll, {}, {mcpArgs: true}, {mcpID: true}} {
		t.Run(fmt.Sprintf("%+v", use), func(t *testing.T) { checkKeyCoversInput(t, use) })
	}
}

func checkKeyCoversInput(t *testing.T, use inputUse) {
	base := func() *Input {
		return &Input{Version: 1, Phase: PhaseRequest,
			Sandbox: SandboxInput{ID: "s", Labels: map[string]string{"k": "v"}},
			Request: RequestInput{Method: "GET", Scheme: "https", Host: "a.example", Port: 443, Path: "/p",
				Query: map[string][]string{"q": {"1"}}, Headers: map[string][]string{"h": {"1"}},
				Body:    mustJSON(t, `{"jsonrpc":"2.0"}`),
				MCP:     &MCPInput{Method: "tools/call", Tool: "t", Arguments: mustJSON(t, `{"a":1}`), ID: mustJSON(t, `7`)},
				GraphQL: &GraphQLInput{OperationType: GraphQLQuery, OperationName: "Q", RootFields: []string{"a"}}}}
	}
	varied := 0
	var walk func(path string, typ reflect.Type, get func(*Input) reflect.Value)
	walk = func(path string, typ reflect.Type, get func(*Input) reflect.Value) {
		if typ.Kind() == reflect.Struct && typ != reflect.TypeOf(jsondoc.Value{}) {
			for i := range typ.NumField() {
				f := typ.Field(i)
				if path == "" && f.Name == "Exec" {
					continue // exec inputs are never cached (Engine.eval)
				}
				walk(path+"."+f.Name, f.Type, func(in *Input) reflect.Value { return get(in).Field(i) })
			}
			return
		}
		for j, change := range variations(t, path, typ) {
			a, b := base(), base()
			change(get(b))
			docChanged := inputValue(a, use).Compare(inputValue(b, use)) != 0
			if !docChanged {
				continue
			}
			varied++
			if bytes.Equal(canonicalInput(nil, a, use), canonicalInput(nil, b, use)) {
				t.Errorf("Input%s (variation %d) changes what the policy sees but not the cache key", path, j)
			}
		}
	}
	walk("", reflect.TypeOf(Input{}), func(in *Input) reflect.Value { return reflect.ValueOf(in).Elem() })
	if varied < 10 {
		t.Errorf("only %d variations changed the document; the walk is broken", varied)
	}
}

// variations returns ways to change a value of typ.
func variations(t *testing.T, path string, typ reflect.Type) []func(reflect.Value) {
	switch {
	case typ.Kind() == reflect.String:
		return []func(reflect.Value){
			func(v reflect.Value) { v.SetString(v.String() + "x") },
			func(v reflect.Value) { v.SetString("") },
		}
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Int64:
		return []func(reflect.Value){func(v reflect.Value) { v.SetInt(v.Int() + 1) }}
	case typ.Kind() == reflect.Bool:
		return []func(reflect.Value){func(v reflect.Value) { v.SetBool(!v.Bool()) }}
	case typ == reflect.TypeOf(map[string]string{}):
		return []func(reflect.Value){
			func(v reflect.Value) { v.SetMapIndex(reflect.ValueOf("k2"), reflect.ValueOf("v")) },
			func(v reflect.Value) { v.SetMapIndex(reflect.ValueOf("k"), reflect.ValueOf("v2")) },
			func(v reflect.Value) { v.Set(reflect.Zero(typ)) },
		}
	case typ == reflect.TypeOf(map[string][]string{}):
		return []func(reflect.Value){
			func(v reflect.Value) { v.SetMapIndex(reflect.ValueOf("k2"), reflect.ValueOf([]string{"1"})) },
			func(v reflect.Value) {
				for _, k := range v.MapKeys() {
					v.SetMapIndex(k, reflect.ValueOf([]string{"1", "2"}))
				}
			},
			func(v reflect.Value) {
				for _, k := range v.MapKeys() {
					v.SetMapIndex(k, reflect.ValueOf([]string{"2"}))
				}
			},
			func(v reflect.Value) { v.Set(reflect.Zero(typ)) },
		}
	case typ == reflect.TypeOf(&jsondoc.Value{}):
		return []func(reflect.Value){
			func(v reflect.Value) { v.Set(reflect.ValueOf(mustJSON(t, `{"a":2}`))) },
			func(v reflect.Value) { v.Set(reflect.ValueOf(mustJSON(t, `"7"`))) },
			func(v reflect.Value) { v.Set(reflect.ValueOf(mustJSON(t, `null`))) },
			func(v reflect.Value) { v.Set(reflect.Zero(typ)) },
		}
	case typ == reflect.TypeOf([]string{}):
		return []func(reflect.Value){
			func(v reflect.Value) { v.Set(reflect.Append(v, reflect.ValueOf("x"))) },
			func(v reflect.Value) { v.Set(reflect.ValueOf([]string{"b"})) },
			func(v reflect.Value) { v.Set(reflect.ValueOf([]string{"a", "a"})) },
			func(v reflect.Value) { v.Set(reflect.Zero(typ)) },
		}
	case typ.Kind() == reflect.Pointer && typ.Elem().Kind() == reflect.Struct:
		// nil, an empty struct, and every variation of each field of the pointed-to struct.
		out := []func(reflect.Value){
			func(v reflect.Value) { v.Set(reflect.Zero(typ)) },
			func(v reflect.Value) { v.Set(reflect.New(typ.Elem())) },
		}
		for i := range typ.Elem().NumField() {
			f := typ.Elem().Field(i)
			for _, change := range variations(t, path+"."+f.Name, f.Type) {
				out = append(out, func(v reflect.Value) {
					cp := reflect.New(typ.Elem())
					if !v.IsNil() {
						cp.Elem().Set(v.Elem())
					}
					change(cp.Elem().Field(i))
					v.Set(cp)
				})
			}
		}
		return out
	}
	t.Fatalf("Input%s has type %s, which this test cannot vary: extend variations, and canonicalInput", path, typ)
	return nil
}

// genInput builds an input from seed over a tiny alphabet holding the bytes separator-joined
// keys use, so that two random inputs often put the same bytes in different fields: the shape
// of every key-confusion attack, where one field's content passes for another's boundary.
func genInput(seed uint64) *Input {
	rnd := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	const alphabet = "a\x00\x01\x02\x03\x04="
	str := func() string {
		b := make([]byte, rnd.IntN(4))
		for i := range b {
			b[i] = alphabet[rnd.IntN(len(alphabet))]
		}
		return string(b)
	}
	small := func(s string) string { // fields that vary less, to give the maps room
		if rnd.IntN(4) == 0 {
			return str()
		}
		return s
	}
	in := &Input{Version: 1, Phase: PhaseRequest}
	in.Sandbox.ID = small("s")
	in.Request.Method, in.Request.Scheme, in.Request.Host, in.Request.Path = small("GET"), small(""), small("h"), small("/")
	in.Request.Port = 443 + rnd.IntN(2)
	if n := rnd.IntN(3); n > 0 {
		in.Sandbox.Labels = map[string]string{}
		for range n {
			in.Sandbox.Labels[str()] = str()
		}
	}
	if n := rnd.IntN(4); n > 0 {
		in.Request.Query = map[string][]string{}
		for range n {
			k := str()
			for range 1 + rnd.IntN(2) {
				in.Request.Query[k] = append(in.Request.Query[k], str())
			}
		}
	}
	return in
}

// nearInput returns a copy of in with one boundary moved: bytes shifted between adjacent
// fields, a value split in two, or a value split into a value and a new pair with a byte
// dropped at each cut (where a separator-joined key would have had its separators).
func nearInput(in *Input, seed uint64) *Input {
	rnd := rand.New(rand.NewPCG(seed, ^seed))
	out := *in
	out.Sandbox.Labels = maps.Clone(in.Sandbox.Labels)
	out.Request.Query = map[string][]string{}
	for k, v := range in.Request.Query {
		out.Request.Query[k] = slices.Clone(v)
	}
	fields := []*string{&out.Sandbox.ID, &out.Request.Method, &out.Request.Scheme, &out.Request.Host, &out.Request.Path}
	keys := slices.Sorted(maps.Keys(out.Request.Query))
	switch op := rnd.IntN(5); {
	case op == 3 && len(keys) > 0: // the same names and values, grouped into other pairs
		var flat []string
		for _, k := range keys {
			flat = append(flat, k)
			flat = append(flat, out.Request.Query[k]...)
		}
		out.Request.Query = map[string][]string{}
		k := flat[0]
		out.Request.Query[k] = nil
		for _, tok := range flat[1:] {
			if rnd.IntN(3) == 0 {
				k = tok
				if _, ok := out.Request.Query[k]; !ok {
					out.Request.Query[k] = nil
				}
				continue
			}
			out.Request.Query[k] = append(out.Request.Query[k], tok)
		}
	case op == 0: // shift a byte across a scalar boundary
		i := rnd.IntN(len(fields) - 1)
		if a := *fields[i]; a != "" {
			*fields[i], *fields[i+1] = a[:len(a)-1], a[len(a)-1:]+*fields[i+1]
		}
	case op == 1 && len(keys) > 0: // split a value in two
		k := keys[rnd.IntN(len(keys))]
		vs := out.Request.Query[k]
		j := rnd.IntN(len(vs))
		cut := rnd.IntN(len(vs[j]) + 1)
		out.Request.Query[k] = slices.Insert(vs, j+1, vs[j][cut:])
		out.Request.Query[k][j] = vs[j][:cut]
	case op == 2 && len(keys) > 0: // a value's tail becomes a pair of its own
		k := keys[rnd.IntN(len(keys))]
		vs := out.Request.Query[k]
		v := vs[len(vs)-1]
		if len(v) >= 2 {
			i := rnd.IntN(len(v) - 1)
			j := i + 1 + rnd.IntN(len(v)-i-1)
			vs[len(vs)-1] = v[:i]
			nk := v[i+1 : j]
			out.Request.Query[nk] = append(out.Request.Query[nk], v[j+1:])
		}
	default: // a label value's tail becomes a label of its own
		for k, v := range out.Sandbox.Labels {
			if len(v) >= 2 {
				i := rnd.IntN(len(v) - 1)
				j := i + 1 + rnd.IntN(len(v)-i-1)
				out.Sandbox.Labels[k] = v[:i]
				out.Sandbox.Labels[v[i+1:j]] = v[j+1:]
			}
			break
		}
	}
	if len(out.Request.Query) == 0 {
		out.Request.Query = nil
	}
	return &out
}

// checkKeyProperty: two inputs share a key exactly when the policy would see the same
// document (its canonical form).
func checkKeyProperty(t *testing.T, a, b *Input, use inputUse) {
	t.Helper()
	sameDoc := inputValue(a, use).Compare(inputValue(b, use)) == 0
	ka, kb := canonicalInput(nil, a, use), canonicalInput(nil, b, use)
	if sameEnc := bytes.Equal(ka, kb); sameEnc != sameDoc {
		t.Fatalf("same document %v, same key %v:\n a %+v %+v\n b %+v %+v", sameDoc, sameEnc, a.Sandbox, a.Request, b.Sandbox, b.Request)
	}
	dc := &decisionCache{use: use}
	if (dc.key(a) == dc.key(b)) != sameDoc {
		t.Fatalf("hashed keys disagree with the encodings for %+v and %+v", a.Request, b.Request)
	}
}

func TestCacheKeyPropertyQuick(t *testing.T) {
	for _, use := range []inputUse{{}, {query: true}, {query: true, queryKeys: []string{"", "a", "a="}}} {
		f := func(seedA, seedB uint64) bool {
			a, b := genInput(seedA), genInput(seedB)
			checkKeyProperty(t, a, b, use)
			checkKeyProperty(t, a, nearInput(a, seedB), use)
			checkKeyProperty(t, a, genInput(seedA), use)
			return true
		}
		if err := quick.Check(f, &quick.Config{MaxCount: 5000}); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzCacheKey: any two inputs share a decision-cache key if and only if the policy would
// see the same document.
func FuzzCacheKey(f *testing.F) {
	f.Add(uint64(1), uint64(2), true)
	f.Add(uint64(0x10000), uint64(0x20000), false)
	f.Fuzz(func(t *testing.T, seedA, seedB uint64, query bool) {
		a := genInput(seedA)
		checkKeyProperty(t, a, genInput(seedB), inputUse{query: query})
		checkKeyProperty(t, a, nearInput(a, seedB), inputUse{query: query})
		// The query as a policy that reads three parameters by name sees it.
		named := inputUse{query: true, queryKeys: []string{"", "a", "a="}}
		checkKeyProperty(t, a, genInput(seedB), named)
		checkKeyProperty(t, a, nearInput(a, seedB), named)
	})
}
