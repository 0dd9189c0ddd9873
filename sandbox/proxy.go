package sandbox

import (
	"context"
	"net"
)

// ProxyHost serves proxied requests for a sandbox. *proxy.Proxy implements it: the sandbox
// opens a listener inside its own network namespace and hands it over with its identity, so
// the connection itself proves who is calling.
type ProxyHost interface {
	// Attach serves ln as identity id until detach is called; detach closes ln and every
	// connection accepted from it.
	Attach(ln net.Listener, id Identity) (detach func())
}

// Revoker revokes every credential lease issued for a sandbox; *secrets.Broker implements it.
type Revoker interface {
	RevokeSandbox(ctx context.Context, id string) error
}
