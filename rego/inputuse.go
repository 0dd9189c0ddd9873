package rego

import (
	"slices"

	"github.com/open-policy-agent/opa/v1/ast"
)

// inputUse says which optional parts of the input a compiled policy can read. Building the
// query, header and body objects is the largest part of building the input, and most policies read
// neither, so they are built only for policies that refer to them. The same goes for an MCP
// call's arguments and JSON-RPC id: a policy that decides on the tool alone then gets one
// decision-cache entry per tool, where an id that differs on every call would make every
// call a miss.
//
// A policy that reads query parameters only by name (input.request.query.service) sees only
// those: the input and the decision-cache key hold just them, so that a parameter the policy
// never reads (a page number, a cache buster) neither costs its building nor makes every
// request a cache miss.
type inputUse struct {
	query, headers, body bool
	// queryKeys, with query set, are the only query parameters the policy reads, sorted;
	// nil means every parameter (the policy reads the query object itself, or a parameter
	// by a name it computes).
	queryKeys      []string
	mcpArgs, mcpID bool
}

// all is every optional part.
var useAll = inputUse{query: true, headers: true, body: true, mcpArgs: true, mcpID: true}

var (
	inputVar   = ast.InputRootDocument.Value
	reqKey     = ast.String("request")
	queryKey   = ast.String("query")
	headersKey = ast.String("headers")
	bodyKey    = ast.String("body")
	mcpKey     = ast.String("mcp")
	argsKey    = ast.String("arguments")
	idKey      = ast.String("id")
)

// inputUseOf inspects every reference to input in the compiled modules (imports are already
// resolved into references there). A reference that could reach the query or the headers
// (input, input.request, input.request.query..., or any with a variable in between) marks
// them as used. The body is built only for a policy that reads input.request.body, an MCP
// call's arguments and id only for one that reads input.request.mcp.arguments or .id, or
// the whole input.request.mcp object. Testing that input.request.mcp exists (an expression
// that is that reference alone, "input.request.mcp" or "not input.request.mcp") does not
// read the object: it is defined with or without the two fields.
func inputUseOf(c *ast.Compiler) inputUse {
	var u inputUse
	for _, m := range c.Modules {
		tests := map[*ast.Term]bool{}
		ast.WalkExprs(m, func(e *ast.Expr) bool {
			if t, ok := e.Terms.(*ast.Term); ok {
				if r, ok := t.Value.(ast.Ref); ok && len(r) == 3 && isInput(r) && r[1].Value.Compare(reqKey) == 0 && r[2].Value.Compare(mcpKey) == 0 {
					tests[t] = true
				}
			}
			return false
		})
		ast.WalkTerms(m, func(t *ast.Term) bool {
			r, ok := t.Value.(ast.Ref)
			if !ok || !isInput(r) {
				return false
			}
			u = u.or(refUse(r, tests[t]))
			return false
		})
	}
	return u
}

func isInput(r ast.Ref) bool { return r[0].Value.Compare(inputVar) == 0 }

// refUse is what one reference to input can read; existence is set when the reference is an
// expression of its own (a test that it is defined and not false).
func refUse(r ast.Ref, existence bool) inputUse {
	if len(r) < 2 {
		return useAll // all of input
	}
	switch k := r[1].Value.(type) {
	case ast.String:
		if k != reqKey {
			return inputUse{}
		}
	case ast.Var, ast.Ref:
	default:
		return inputUse{}
	}
	if len(r) < 3 {
		return useAll // all of input.request
	}
	var u inputUse
	switch k := r[2].Value.(type) {
	case ast.String:
		u.query = k == queryKey
		if u.query && len(r) > 3 {
			if name, ok := r[3].Value.(ast.String); ok {
				u.queryKeys = []string{string(name)}
			}
		}
		u.headers = k == headersKey
		u.body = k == bodyKey
		if k != mcpKey || existence {
			return u
		}
		if len(r) < 4 {
			return inputUse{mcpArgs: true, mcpID: true} // the whole mcp object
		}
		switch k := r[3].Value.(type) {
		case ast.String:
			u.mcpArgs = k == argsKey
			u.mcpID = k == idKey
		case ast.Var, ast.Ref:
			u.mcpArgs, u.mcpID = true, true
		}
		return u
	case ast.Var, ast.Ref:
		return useAll
	}
	return u
}

func (u inputUse) or(v inputUse) inputUse {
	return inputUse{
		query: u.query || v.query, headers: u.headers || v.headers, body: u.body || v.body,
		queryKeys: orQueryKeys(u, v), mcpArgs: u.mcpArgs || v.mcpArgs, mcpID: u.mcpID || v.mcpID,
	}
}

// orQueryKeys is the query parameters read by either: every one when either reads them all.
func orQueryKeys(u, v inputUse) []string {
	switch {
	case !u.query:
		return v.queryKeys
	case !v.query:
		return u.queryKeys
	case u.queryKeys == nil || v.queryKeys == nil:
		return nil
	}
	keys := append(slices.Clone(u.queryKeys), v.queryKeys...)
	slices.Sort(keys)
	return slices.Compact(keys)
}
