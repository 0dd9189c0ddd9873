// Package identity is the sandbox identity shared by the proxy and the sandbox module
// (exported to users as sandbox.Identity), kept apart so the proxy does not depend on the
// sandbox spawner.
package identity

import (
	"errors"
	"fmt"
	"regexp"
)

// DefaultID is the identity of requests on a shared proxy listener that present no credential.
const DefaultID = "default"

// Identity is who a request comes from: the sandbox that holds the listener or the proxy
// credential it arrived with.
type Identity struct {
	ID     string            `json:"id"`
	Labels map[string]string `json:"labels,omitempty"`
	// Exec is the sandbox session's command a request came from, when the request said
	// so with that command's exec credential; empty otherwise. It attributes, it does not
	// authorise: policy sees ID and Labels.
	Exec string `json:"exec,omitempty"`
}

// MaxIDLen bounds a sandbox id (a DNS label's length, so that it fits object names).
const MaxIDLen = 63

// ErrInvalidID is the error CheckID wraps.
var ErrInvalidID = errors.New("invalid sandbox id")

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// CheckID is the one rule for sandbox ids, used by every entry point (proxy credentials,
// the admin API, sandbox.New, the CLI): 1-63 lower-case letters, digits and '-', starting
// with a letter or digit, and not DefaultID. Ids are compared byte for byte everywhere
// (revocation lists, metrics, audit), so there is exactly one spelling of each: "SBX-A"
// is refused, not folded into "sbx-a".
func CheckID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty; want 1-%d lower-case letters, digits or '-'", ErrInvalidID, MaxIDLen)
	case len(id) > MaxIDLen:
		return fmt.Errorf("%w %.20q...: %d bytes, want at most %d", ErrInvalidID, id, len(id), MaxIDLen)
	case !idPattern.MatchString(id):
		return fmt.Errorf("%w %q: want lower-case letters, digits or '-', starting with a letter or digit (ids have one spelling: no upper case, '_' or '.')", ErrInvalidID, id)
	case id == DefaultID:
		return fmt.Errorf("%w %q: it is the identity of requests without a credential; pick another", ErrInvalidID, id)
	}
	return nil
}
