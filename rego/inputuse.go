package rego

import "github.com/open-policy-agent/opa/v1/ast"

// inputUse says which optional parts of the input a compiled policy can read. Building the
// query, header and body objects is the largest part of building the input, and most policies read
// neither, so they are built only for policies that refer to them.
type inputUse struct {
	query, headers, body bool
}

// all is every optional part.
var useAll = inputUse{query: true, headers: true, body: true}

var (
	inputVar   = ast.InputRootDocument.Value
	reqKey     = ast.String("request")
	queryKey   = ast.String("query")
	headersKey = ast.String("headers")
	bodyKey    = ast.String("body")
)

// inputUseOf inspects every reference to input in the compiled modules (imports are already
// resolved into references there). A reference that could reach the query or the headers
// (input, input.request, input.request.query..., or any with a variable in between) marks
// them as used. The body is built only for a policy that reads input.request.body; the mcp
// and graphql views are small and always built when present.
func inputUseOf(c *ast.Compiler) inputUse {
	var u inputUse
	for _, m := range c.Modules {
		ast.WalkRefs(m, func(r ast.Ref) bool {
			if r[0].Value.Compare(inputVar) != 0 {
				return false
			}
			if len(r) < 2 {
				u = useAll // all of input
				return false
			}
			switch k := r[1].Value.(type) {
			case ast.String:
				if k != reqKey {
					return false
				}
			case ast.Var, ast.Ref:
			default:
				return false
			}
			if len(r) < 3 {
				u = useAll // all of input.request
				return false
			}
			switch k := r[2].Value.(type) {
			case ast.String:
				u.query = u.query || k == queryKey
				u.headers = u.headers || k == headersKey
				u.body = u.body || k == bodyKey
			case ast.Var, ast.Ref:
				u = useAll
			}
			return false
		})
	}
	return u
}
