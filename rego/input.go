package rego

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/airlock-proxy/airlock/internal/jsondoc"
)

// Keys of the input document. Terms are immutable once built; sharing them between
// evaluations saves an allocation per key.
var (
	keyVersion = ast.StringTerm("version")
	keyPhase   = ast.StringTerm("phase")
	keySandbox = ast.StringTerm("sandbox")
	keyRequest = ast.StringTerm("request")
	keyID      = ast.StringTerm("id")
	keyLabels  = ast.StringTerm("labels")
	keyMethod  = ast.StringTerm("method")
	keyScheme  = ast.StringTerm("scheme")
	keyHost    = ast.StringTerm("host")
	keyPort    = ast.StringTerm("port")
	keyPath    = ast.StringTerm("path")
	keyQuery   = ast.StringTerm("query")
	keyHeaders = ast.StringTerm("headers")
	keyExec    = ast.StringTerm("exec")
	keyArgv    = ast.StringTerm("argv")
	keyCwd     = ast.StringTerm("cwd")
	keyEnv     = ast.StringTerm("env")
	keyBody    = ast.StringTerm("body")
	keyMCP     = ast.StringTerm("mcp")
	keyGraphQL = ast.StringTerm("graphql")
	keyTool    = ast.StringTerm("tool")
	keyArgs    = ast.StringTerm("arguments")
	keyOpType  = ast.StringTerm("operation_type")
	keyOpName  = ast.StringTerm("operation_name")
	keyFields  = ast.StringTerm("root_fields")
)

// inputValue builds the policy input as an AST value directly, without a JSON round trip. Its
// shape is the JSON form of Input: scheme, path, query, headers, body, mcp and graphql are
// left out when empty; labels is always an object. Query, headers, body and an MCP call's
// arguments and id are left out too when the policy never reads them (use).
//
// Objects are made with ast.NewObject from all their items at once, which allocates their
// elements in one block instead of one per key: the input is built for every evaluation.
func inputValue(in *Input, use inputUse) ast.Value { return inputValueReusing(in, use, nil) }

// inputValueReusing is inputValue taking the sandbox object from sbx when it has it.
func inputValueReusing(in *Input, use inputUse, sbx *sandboxTerms) ast.Value {
	st := sbx.term(&in.Sandbox)
	if in.Phase == PhaseExec {
		return ast.NewObject(
			ast.Item(keyVersion, ast.InternedTerm(in.Version)),
			ast.Item(keyPhase, ast.InternedTerm(string(in.Phase))),
			ast.Item(keySandbox, st),
			ast.Item(keyExec, execValue(in.Exec)),
		)
	}
	return ast.NewObject(
		ast.Item(keyVersion, ast.InternedTerm(in.Version)),
		ast.Item(keyPhase, ast.InternedTerm(string(in.Phase))),
		ast.Item(keySandbox, st),
		ast.Item(keyRequest, requestTerm(&in.Request, use)),
	)
}

// requestTerm is the input's "request" object.
func requestTerm(r *RequestInput, use inputUse) *ast.Term {
	var items [10][2]*ast.Term
	n := 0
	add := func(k, v *ast.Term) { items[n] = ast.Item(k, v); n++ }
	add(keyMethod, ast.InternedTerm(r.Method))
	if r.Scheme != "" {
		add(keyScheme, ast.InternedTerm(r.Scheme))
	}
	add(keyHost, ast.InternedTerm(r.Host))
	add(keyPort, ast.InternedTerm(r.Port))
	if r.Path != "" {
		add(keyPath, ast.InternedTerm(r.Path))
	}
	if use.query && len(r.Query) > 0 {
		if t := queryTerm(r.Query, use.queryKeys); t != nil {
			add(keyQuery, t)
		}
	}
	if use.headers && len(r.Headers) > 0 {
		add(keyHeaders, multiValue(r.Headers))
	}
	if use.body && r.Body != nil && r.Body.Kind != 0 {
		add(keyBody, jsonTerm(r.Body))
	}
	if m := r.MCP; m != nil {
		obj := ast.NewObjectWithCapacity(4)
		if m.Method != "" {
			obj.Insert(keyMethod, ast.StringTerm(m.Method))
		}
		if m.Tool != "" {
			obj.Insert(keyTool, ast.StringTerm(m.Tool))
		}
		if use.mcpArgs && m.Arguments != nil && m.Arguments.Kind != 0 {
			obj.Insert(keyArgs, jsonTerm(m.Arguments))
		}
		if use.mcpID && m.ID != nil && m.ID.Kind != 0 {
			obj.Insert(keyID, jsonTerm(m.ID))
		}
		add(keyMCP, ast.NewTerm(obj))
	}
	if g := r.GraphQL; g != nil {
		obj := ast.NewObjectWithCapacity(3)
		obj.Insert(keyOpType, ast.InternedTerm(string(g.OperationType)))
		if g.OperationName != "" {
			obj.Insert(keyOpName, ast.StringTerm(g.OperationName))
		}
		fields := make([]*ast.Term, len(g.RootFields))
		for i, f := range g.RootFields {
			fields[i] = ast.StringTerm(f)
		}
		obj.Insert(keyFields, ast.ArrayTerm(fields...))
		add(keyGraphQL, ast.NewTerm(obj))
	}
	return ast.NewTerm(ast.NewObject(items[:n]...))
}

// sandboxValue is the input's "sandbox" object: id and labels (always an object).
func sandboxValue(s *SandboxInput) *ast.Term {
	labels := make([][2]*ast.Term, 0, len(s.Labels))
	for k, v := range s.Labels {
		labels = append(labels, ast.Item(ast.InternedTerm(k), ast.InternedTerm(v)))
	}
	return ast.NewTerm(ast.NewObject(
		ast.Item(keyID, ast.InternedTerm(s.ID)),
		ast.Item(keyLabels, ast.NewTerm(ast.NewObject(labels...))),
	))
}

// sandboxTerms remembers the sandbox object last built, for the next input from the same
// sandbox (requests come from a few sandboxes, many from each). AST terms are never changed
// once built, so concurrent evaluations can share one. A nil *sandboxTerms builds every time.
type sandboxTerms struct {
	last atomic.Pointer[sandboxTerm]
}

type sandboxTerm struct {
	id     string
	labels map[string]string // a copy: the caller's map may change after the call
	term   *ast.Term
}

func (c *sandboxTerms) term(s *SandboxInput) *ast.Term {
	if c == nil {
		return sandboxValue(s)
	}
	if e := c.last.Load(); e != nil && e.id == s.ID && maps.Equal(e.labels, s.Labels) {
		return e.term
	}
	t := sandboxValue(s)
	c.last.Store(&sandboxTerm{id: s.ID, labels: maps.Clone(s.Labels), term: t})
	return t
}

// execValue is the exec phase's "exec" object; argv and env are always arrays.
func execValue(e *ExecInput) *ast.Term {
	if e == nil {
		e = &ExecInput{}
	}
	strs := func(ss []string) *ast.Term {
		terms := make([]*ast.Term, len(ss))
		for i, v := range ss {
			terms[i] = ast.StringTerm(v)
		}
		return ast.ArrayTerm(terms...)
	}
	obj := ast.NewObjectWithCapacity(3)
	obj.Insert(keyArgv, strs(e.Argv))
	obj.Insert(keyCwd, ast.StringTerm(e.Cwd))
	obj.Insert(keyEnv, strs(e.Env))
	return ast.NewTerm(obj)
}

// jsonTerm converts a parsed JSON value to a term. Numbers keep their literal.
func jsonTerm(v *jsondoc.Value) *ast.Term {
	switch v.Kind {
	case jsondoc.Null:
		return ast.InternedNullTerm
	case jsondoc.Bool:
		return ast.InternedTerm(v.Str == "true")
	case jsondoc.Number:
		return ast.NumberTerm(json.Number(v.Str))
	case jsondoc.String:
		return ast.StringTerm(v.Str)
	case jsondoc.Array:
		terms := make([]*ast.Term, len(v.Elems))
		for i := range v.Elems {
			terms[i] = jsonTerm(&v.Elems[i])
		}
		return ast.ArrayTerm(terms...)
	default:
		obj := ast.NewObjectWithCapacity(len(v.Keys))
		for i, k := range v.Keys {
			obj.Insert(ast.StringTerm(k), jsonTerm(&v.Elems[i]))
		}
		return ast.NewTerm(obj)
	}
}

// queryTerm is the query object: every parameter when keys is nil, else those of keys it
// holds; nil when that leaves none (the query is then left out, as an empty one is).
func queryTerm(q map[string][]string, keys []string) *ast.Term {
	if keys == nil {
		return multiValue(q)
	}
	var small [4][2]*ast.Term
	items := small[:0]
	for _, k := range keys {
		if vs, ok := q[k]; ok {
			items = append(items, ast.Item(ast.InternedTerm(k), stringsTerm(vs)))
		}
	}
	if len(items) == 0 {
		return nil
	}
	return ast.NewTerm(ast.NewObject(items...))
}

func stringsTerm(vs []string) *ast.Term {
	terms := make([]*ast.Term, len(vs))
	for i, v := range vs {
		terms[i] = ast.InternedTerm(v)
	}
	return ast.ArrayTerm(terms...)
}

// multiValue turns a query or header map into an object of string arrays.
func multiValue(m map[string][]string) *ast.Term {
	var small [8][2]*ast.Term
	items := small[:0]
	for k, vs := range m {
		items = append(items, ast.Item(ast.InternedTerm(k), stringsTerm(vs)))
	}
	return ast.NewTerm(ast.NewObject(items...))
}

// ParseInputJSON reads a policy input in the JSON form of docs/architecture.md (for `airlock policy eval
// --input F`). It is strict: unknown fields, trailing data, a version other than 1, an
// unknown phase or a missing host are errors that name what is wrong.
func ParseInputJSON(b []byte) (*Input, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var in Input
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("parse policy input: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("parse policy input: unexpected data after the JSON object")
	}
	if err := in.Validate(); err != nil {
		return nil, fmt.Errorf("parse policy input: %w", err)
	}
	return &in, nil
}

// Validate checks the fields the policy relies on: version, phase, and method, host and
// port (connect and request phases) or argv (exec phase).
func (in *Input) Validate() error {
	if in.Version == InputVersion && in.Phase == PhaseExec {
		if in.Exec == nil || len(in.Exec.Argv) == 0 {
			return errors.New("exec.argv is empty")
		}
		return nil
	}
	switch {
	case in.Version != InputVersion:
		return fmt.Errorf("version is %d, want %d", in.Version, InputVersion)
	case in.Phase != PhaseConnect && in.Phase != PhaseRequest:
		return fmt.Errorf("phase is %q, want %q, %q or %q", in.Phase, PhaseConnect, PhaseRequest, PhaseExec)
	case in.Request.Method == "":
		return errors.New("request.method is empty")
	case in.Request.Host == "":
		return errors.New("request.host is empty")
	case in.Request.Port < 1 || in.Request.Port > 65535:
		return fmt.Errorf("request.port is %d, want 1-65535", in.Request.Port)
	}
	return nil
}
