// Package secrets brokers short-lived credentials (Vault, env, file) onto outbound requests.
package secrets

import (
	"net/http"
)

// AttachRequest asks for named credentials to be set on an outbound request.
type AttachRequest struct {
	SandboxID string
	Names     []string
	// Out is the outbound request, already stripped of hop-by-hop headers, Proxy-* headers
	// and Authorization as the client sent it. Attach sets a header, query or basic auth on it.
	Out *http.Request
}

// Scrubber rewrites an upstream response so that no injected secret value reaches the sandbox.
type Scrubber interface {
	ScrubResponse(resp *http.Response)
}
