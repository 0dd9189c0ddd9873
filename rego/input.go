package rego

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

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
func inputValue(in *Input, use inputUse) ast.Value {
	labels := ast.NewObjectWithCapacity(len(in.Sandbox.Labels))
	for k, v := range in.Sandbox.Labels {
		labels.Insert(ast.InternedTerm(k), ast.InternedTerm(v))
	}
	sbx := ast.NewObjectWithCapacity(2)
	sbx.Insert(keyID, ast.InternedTerm(in.Sandbox.ID))
	sbx.Insert(keyLabels, ast.NewTerm(labels))

	if in.Phase == PhaseExec {
		top := ast.NewObjectWithCapacity(4)
		top.Insert(keyVersion, ast.InternedTerm(in.Version))
		top.Insert(keyPhase, ast.InternedTerm(string(in.Phase)))
		top.Insert(keySandbox, ast.NewTerm(sbx))
		top.Insert(keyExec, execValue(in.Exec))
		return top
	}

	r := &in.Request
	req := ast.NewObjectWithCapacity(7)
	req.Insert(keyMethod, ast.InternedTerm(r.Method))
	if r.Scheme != "" {
		req.Insert(keyScheme, ast.InternedTerm(r.Scheme))
	}
	req.Insert(keyHost, ast.InternedTerm(r.Host))
	req.Insert(keyPort, ast.InternedTerm(r.Port))
	if r.Path != "" {
		req.Insert(keyPath, ast.InternedTerm(r.Path))
	}
	if use.query && len(r.Query) > 0 {
		req.Insert(keyQuery, multiValue(r.Query))
	}
	if use.headers && len(r.Headers) > 0 {
		req.Insert(keyHeaders, multiValue(r.Headers))
	}
	if use.body && r.Body != nil && r.Body.Kind != 0 {
		req.Insert(keyBody, jsonTerm(r.Body))
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
		req.Insert(keyMCP, ast.NewTerm(obj))
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
		req.Insert(keyGraphQL, ast.NewTerm(obj))
	}

	top := ast.NewObjectWithCapacity(4)
	top.Insert(keyVersion, ast.InternedTerm(in.Version))
	top.Insert(keyPhase, ast.InternedTerm(string(in.Phase)))
	top.Insert(keySandbox, ast.NewTerm(sbx))
	top.Insert(keyRequest, ast.NewTerm(req))
	return top
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

// multiValue turns a query or header map into an object of string arrays.
func multiValue(m map[string][]string) *ast.Term {
	obj := ast.NewObjectWithCapacity(len(m))
	for k, vs := range m {
		terms := make([]*ast.Term, len(vs))
		for i, v := range vs {
			terms[i] = ast.InternedTerm(v)
		}
		obj.Insert(ast.InternedTerm(k), ast.ArrayTerm(terms...))
	}
	return ast.NewTerm(obj)
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
