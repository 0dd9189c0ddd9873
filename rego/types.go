package rego

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/airlock-proxy/airlock/internal/jsondoc"
)

// InputVersion is the version of the policy input schema in docs/architecture.md.
const InputVersion = 1

// Phase says at which point of a request the policy is asked.
type Phase string

const (
	// PhaseConnect is the endpoint check of a CONNECT: only method, host and port are set.
	PhaseConnect Phase = "connect"
	// PhaseRequest is a full HTTP request (plain HTTP, or one inside an intercepted tunnel).
	PhaseRequest Phase = "request"
	// PhaseExec is a command about to run in a sandbox session: Exec is set, Request is
	// empty.
	PhaseExec Phase = "exec"
)

// Input is what the policy sees as `input`. Its JSON form is the contract of docs/architecture.md.
type Input struct {
	Version int          `json:"version"`
	Phase   Phase        `json:"phase"`
	Sandbox SandboxInput `json:"sandbox"`
	Request RequestInput `json:"request,omitzero"`
	// Exec is the command of the exec phase; nil in the others.
	Exec *ExecInput `json:"exec,omitempty"`
}

// ExecInput describes a command about to run in a sandbox: its argument vector, working
// directory and the names (never the values) of the environment variables it adds.
type ExecInput struct {
	Argv []string `json:"argv"`
	Cwd  string   `json:"cwd"`
	Env  []string `json:"env"`
}

// SandboxInput identifies the caller.
type SandboxInput struct {
	ID     string            `json:"id"`
	Labels map[string]string `json:"labels"`
}

// RequestInput describes the request. Host is already normalised; Authorization, Cookie and
// Proxy-Authorization are never present in Headers (keys are lower case).
type RequestInput struct {
	Method  string              `json:"method"`
	Scheme  string              `json:"scheme,omitempty"`
	Host    string              `json:"host"`
	Port    int                 `json:"port"`
	Path    string              `json:"path,omitempty"`
	Query   map[string][]string `json:"query,omitempty"`
	Headers map[string][]string `json:"headers,omitempty"`
	// Body, MCP and GraphQL are set only for requests to body-aware destinations (the
	// policy's data.body_aware): Body is the parsed JSON body (for one call of a JSON-RPC
	// batch, that call), MCP the JSON-RPC 2.0 message it holds, GraphQL the operation a
	// GraphQL request runs (from the JSON body or ?query=).
	Body    *jsondoc.Value `json:"body,omitempty"`
	MCP     *MCPInput      `json:"mcp,omitempty"`
	GraphQL *GraphQLInput  `json:"graphql,omitempty"`
}

// MCPInput is a JSON-RPC 2.0 message (an MCP request, notification or response). Tool and
// Arguments are params.name and params.arguments of a "tools/call"; ID is absent for a
// notification.
type MCPInput struct {
	Method    string         `json:"method,omitempty"`
	Tool      string         `json:"tool,omitempty"`
	Arguments *jsondoc.Value `json:"arguments,omitempty"`
	ID        *jsondoc.Value `json:"id,omitempty"`
}

// GraphQLOperationType is what a GraphQL operation does.
type GraphQLOperationType string

const (
	GraphQLQuery        GraphQLOperationType = "query"
	GraphQLMutation     GraphQLOperationType = "mutation"
	GraphQLSubscription GraphQLOperationType = "subscription"
)

// GraphQLInput is the one operation a GraphQL request runs. RootFields are the names (not
// aliases) of the fields selected at its root, fragments on the root expanded, each once,
// in document order.
type GraphQLInput struct {
	OperationType GraphQLOperationType `json:"operation_type"`
	OperationName string               `json:"operation_name,omitempty"`
	RootFields    []string             `json:"root_fields"`
}

// Action is what a decision says to do. The zero value denies.
type Action string

const (
	ActionDeny    Action = "deny"
	ActionAllow   Action = "allow"
	ActionApprove Action = "approve"
)

// Decision is the policy's answer. Its zero value denies: an Action other than allow or
// approve, or a missing decision, is a deny.
type Decision struct {
	Action      Action         `json:"action"`
	Reason      string         `json:"reason,omitempty"`
	Rule        string         `json:"rule,omitempty"`
	Credentials []string       `json:"credentials,omitempty"`
	Tunnel      bool           `json:"tunnel,omitempty"`
	Approval    ApprovalParams `json:"approval,omitzero"`
	// Reflects false declares that the destination never echoes the credentials it is
	// sent, so responses to it pass without their bodies being checked. Unset means true.
	Reflects *bool `json:"reflects,omitempty"`
	// Upgrade allows a request carrying credentials to switch protocols (WebSocket).
	Upgrade bool `json:"upgrade,omitempty"`
	// CredentialOptional lets the request go without a credential of Credentials that
	// this proxy's config does not define at all (a public read, anonymous on a fresh
	// install; a configured credential upgrades it). A configured credential that cannot
	// be fetched still refuses the request (503): only an absent one is optional.
	CredentialOptional bool `json:"credential_optional,omitempty"`
}

// ApprovalParams are per-rule settings for held requests.
type ApprovalParams struct {
	Timeout Duration `json:"timeout,omitzero"`
}

// Allows reports whether the request may proceed without a human.
func (d Decision) Allows() bool { return d.Action == ActionAllow }

// NeedsApproval reports whether the request must be held for approval.
func (d Decision) NeedsApproval() bool { return d.Action == ActionApprove }

// MayReflect reports whether the destination may echo attached credentials back: true unless
// the decision says "reflects": false.
func (d Decision) MayReflect() bool { return d.Reflects == nil || *d.Reflects }

// Denies reports whether the request is refused (anything that is not allow or approve).
func (d Decision) Denies() bool { return !d.Allows() && !d.NeedsApproval() }

// Duration is a time.Duration that reads "10m" or a number of seconds from JSON.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch x := v.(type) {
	case string:
		p, err := time.ParseDuration(x)
		if err != nil {
			return fmt.Errorf("duration %q: %w", x, err)
		}
		*d = Duration(p)
	case float64:
		*d = Duration(time.Duration(x * float64(time.Second)))
	default:
		return fmt.Errorf("duration: want a string such as \"10m\", got %s", b)
	}
	return nil
}
