package approval

import (
	"encoding/json"
	"strings"
)

// CallKind says what a held request's body holds, as the policy read it.
type CallKind string

const (
	CallMCP     CallKind = "mcp"     // a JSON-RPC 2.0 (MCP) message
	CallGraphQL CallKind = "graphql" // a GraphQL operation
	CallJSON    CallKind = "json"    // a JSON body of neither kind
)

// Call is one call a held request makes, as the policy saw it: for a destination whose
// bodies the policy reads, each JSON-RPC message of a batch (or the one message), or the
// GraphQL operation. Action and Rule are the policy's decision for that call. It is a view
// for approvers: the approval itself binds the exact body.
type Call struct {
	Kind          CallKind        `json:"kind"`
	Method        string          `json:"method,omitempty"` // JSON-RPC method, e.g. "tools/call"
	Tool          string          `json:"tool,omitempty"`
	Arguments     json.RawMessage `json:"arguments,omitempty"`
	OperationType string          `json:"operation_type,omitempty"`
	OperationName string          `json:"operation_name,omitempty"`
	RootFields    []string        `json:"root_fields,omitempty"`
	Action        string          `json:"action"`
	Rule          string          `json:"rule,omitempty"`
}

// Summary is a one-line description: "tools/call update_issue", "mutation CloseIssue
// {closeIssue}".
func (c Call) Summary() string {
	switch c.Kind {
	case CallMCP:
		s := c.Method
		if s == "" {
			s = "JSON-RPC response"
		}
		if c.Tool != "" {
			s += " " + c.Tool
		}
		return s
	case CallGraphQL:
		s := c.OperationType
		if c.OperationName != "" {
			s += " " + c.OperationName
		}
		return s + " {" + strings.Join(c.RootFields, ", ") + "}"
	}
	return "JSON body"
}

// maxShownArguments bounds the arguments a Slack message quotes (the record has them whole).
const maxShownArguments = 300
