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
	URL       string      // full URL; query secrets are redacted in what is stored
	Header    http.Header // the headers the policy saw (no Authorization, Cookie, Proxy-*)
	Body      []byte      // the exact bytes that are sent if approved
	Rule      string
	Reason    string
	Creds     []string      // credential names, attached only after approval
	Timeout   time.Duration // 0: the configured default
}

// Result is how a held request ended.
type Result struct {
	ID        string
	State     string // approved, denied, expired, cancelled
	DecidedBy string
	Comment   string
	Waited    time.Duration
}

// Approved reports whether the request may be sent.
func (r Result) Approved() bool { return r.State == "approved" }
