package sandbox

// DefaultID is the identity of requests on a plain proxy listener that present no credential.
const DefaultID = "default"

// Identity is who a request comes from: the sandbox that holds the listener or the proxy
// credential it arrived with.
type Identity struct {
	ID     string
	Labels map[string]string
}
