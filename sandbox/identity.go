package sandbox

import "github.com/airlock-proxy/airlock/internal/identity"

// DefaultID is the identity of requests on a plain proxy listener that present no credential.
const DefaultID = identity.DefaultID

// Identity is who a request comes from: the sandbox that holds the listener or the proxy
// credential it arrived with.
type Identity = identity.Identity
