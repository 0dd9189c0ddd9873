// Package secrets brokers short-lived credentials (Vault, env, file) onto outbound requests.
package secrets

import (
	"io"
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

// Scrubber keeps injected secret values, in the spellings upstreams commonly give them (any
// letter case, URL, JSON and HTML escapes, hex, UTF-16, base64 at any alignment), out of
// everything an upstream returns.
type Scrubber interface {
	// ScrubResponse scrubs status text, headers, trailers and body (decoded from gzip or
	// deflate). A response it cannot check (partial, stacked or unknown codings, compressed
	// payloads) gets its body closed and an *UninspectableError: it must not be passed on.
	ScrubResponse(resp *http.Response) error
	// ScrubHead scrubs status text, headers and trailers and leaves the body as it is: for
	// destinations declared not to reflect credentials.
	ScrubHead(resp *http.Response)
	// ScrubString redacts every value in s (an error text quoting upstream bytes).
	ScrubString(s string) string
	// Reader redacts every value in src as it streams.
	Reader(src io.ReadCloser) io.ReadCloser
	// Redactions is how many times a value was redacted so far in this request's response:
	// an upstream that keeps echoing a value may be used to test guesses at it.
	Redactions() int64
}
