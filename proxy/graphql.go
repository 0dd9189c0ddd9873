package proxy

import (
	"errors"
	"fmt"

	gqlast "github.com/vektah/gqlparser/v2/ast"
	gqlparser "github.com/vektah/gqlparser/v2/parser"

	"github.com/airlock-proxy/airlock/rego"
)

// maxGraphQLTokens bounds the work of parsing one GraphQL document.
const maxGraphQLTokens = 50_000

// graphQLOperation finds the operation a GraphQL request runs: the document's only
// operation, or the one named operationName. A document with several operations and no
// name, an unknown name, an anonymous operation beside others, or a document that does not
// parse is an error (a server could pick another operation than the policy saw).
func graphQLOperation(query, operationName string) (*rego.GraphQLInput, error) {
	doc, err := gqlparser.ParseQueryWithTokenLimit(&gqlast.Source{Input: query}, maxGraphQLTokens)
	if err != nil {
		return nil, fmt.Errorf("the GraphQL document does not parse: %s", err.Error())
	}
	if len(doc.Operations) == 0 {
		return nil, errors.New("the GraphQL document has no operation")
	}
	var op *gqlast.OperationDefinition
	for _, o := range doc.Operations {
		if len(doc.Operations) > 1 && o.Name == "" {
			return nil, errors.New("the GraphQL document has an anonymous operation beside others")
		}
		if operationName == "" || o.Name == operationName {
			if op != nil {
				if operationName == "" {
					return nil, errors.New("the GraphQL document has several operations and no operationName says which one runs")
				}
				return nil, fmt.Errorf("the GraphQL document defines operation %q more than once", operationName)
			}
			op = o
		}
	}
	if op == nil {
		return nil, fmt.Errorf("the GraphQL document has no operation named %q", operationName)
	}
	frags := map[string]*gqlast.FragmentDefinition{}
	for _, f := range doc.Fragments {
		if frags[f.Name] != nil {
			return nil, fmt.Errorf("the GraphQL document defines fragment %q more than once", f.Name)
		}
		frags[f.Name] = f
	}
	out := &rego.GraphQLInput{OperationName: op.Name, RootFields: []string{}}
	switch op.Operation {
	case gqlast.Query, "":
		out.OperationType = rego.GraphQLQuery
	case gqlast.Mutation:
		out.OperationType = rego.GraphQLMutation
	case gqlast.Subscription:
		out.OperationType = rego.GraphQLSubscription
	default:
		return nil, fmt.Errorf("the GraphQL operation type %q is unknown", op.Operation)
	}
	seen := map[string]bool{}
	visiting, done := map[string]bool{}, map[string]bool{}
	var walk func(gqlast.SelectionSet) error
	walk = func(set gqlast.SelectionSet) error {
		for _, sel := range set {
			switch s := sel.(type) {
			case *gqlast.Field:
				// Directives (@skip, @include) are ignored: the list is every field that
				// may run.
				if !seen[s.Name] {
					seen[s.Name] = true
					out.RootFields = append(out.RootFields, s.Name)
				}
			case *gqlast.InlineFragment:
				if err := walk(s.SelectionSet); err != nil {
					return err
				}
			case *gqlast.FragmentSpread:
				f := frags[s.Name]
				if f == nil {
					return fmt.Errorf("the GraphQL document spreads fragment %q, which it does not define", s.Name)
				}
				if done[s.Name] {
					continue // its fields are listed already; walking it again could be exponential
				}
				if visiting[s.Name] {
					return fmt.Errorf("the GraphQL fragment %q spreads itself", s.Name)
				}
				visiting[s.Name] = true
				if err := walk(f.SelectionSet); err != nil {
					return err
				}
				visiting[s.Name], done[s.Name] = false, true
			}
		}
		return nil
	}
	if err := walk(op.SelectionSet); err != nil {
		return nil, err
	}
	return out, nil
}
