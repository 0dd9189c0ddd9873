// Package identity is the sandbox identity shared by the proxy and the sandbox module
// (exported to users as sandbox.Identity), kept apart so the proxy does not depend on the
// sandbox spawner.
package identity

// DefaultID is the identity of requests on a shared proxy listener that present no credential.
const DefaultID = "default"

// Identity is who a request comes from: the sandbox that holds the listener or the proxy
// credential it arrived with.
type Identity struct {
	ID     string            `json:"id"`
	Labels map[string]string `json:"labels,omitempty"`
}
