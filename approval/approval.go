// Package approval holds write calls until a person or an approval service decides.
package approval

import (
	"net/http"
	"time"
)

// Request is a request that the policy said must be approved before it is sent.
type Request struct {
	SandboxID string
	Labels    map[string]string
	Method    string
	// URL is what is sent: scheme://host[:port] followed by the request target exactly as
	// it goes on the wire (path and raw query). Shown to approvers as is.
	URL string
	// Header is every header that is forwarded if approved, names and values as sent (the
	// sandbox's Cookie and Authorization included); only what airlock adds after approval
	// (credentials) and hop-by-hop framing are not in it.
	Header  http.Header
	Body    []byte // the exact bytes that are sent if approved
	Rule    string
	Reason  string
	Creds   []string      // credential names, attached only after approval
	Timeout time.Duration // 0: the configured default
	// Calls are what the body does, for destinations whose bodies the policy reads (MCP
	// tool calls, GraphQL operations), with the policy's decision on each.
	Calls []Call
}

// Result is how a held request ended.
type Result struct {
	ID        string
	State     State // approved, denied, cancelled, expired, disconnected
	DecidedBy string
	Comment   string
	Waited    time.Duration
}

// Approved reports whether the request may be sent.
func (r Result) Approved() bool { return r.State == StateApproved }
