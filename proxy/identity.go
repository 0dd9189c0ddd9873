package proxy

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"

	"github.com/airlock-proxy/airlock/internal/identity"
)

// errAuth is a missing, malformed, unknown or revoked proxy credential.
var errAuth = errors.New("proxy credential required")

// lookupToken checks a Proxy-Authorization value: errAuth for a missing, malformed,
// unknown, expired or revoked credential, errCredentialUnchecked when the revocation list
// cannot be asked.
func (p *Proxy) lookupToken(ctx context.Context, header string) (identity.Identity, error) {
	scheme, rest, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return identity.Identity{}, errAuth
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
	if err != nil {
		return identity.Identity{}, errAuth
	}
	user, tok, ok := strings.Cut(string(raw), ":")
	if !ok {
		return identity.Identity{}, errAuth
	}
	return p.tokens.check(ctx, user, tok)
}

// basicCredentials splits a Basic Proxy-Authorization value.
func basicCredentials(header string) (user, secret string, ok bool) {
	scheme, rest, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(raw), ":")
}

type ctxKey int

const (
	listenerKey ctxKey = iota
	identityKey
)

// listenerInfo is attached to every connection accepted on a listener.
type listenerInfo struct {
	bound *identity.Identity // nil for the shared --listen listener
}

// identify returns who sent r: the listener's identity, a valid proxy credential, or
// sandbox "default" on the shared listener unless RequireAuth.
func (p *Proxy) identify(r *http.Request) (identity.Identity, error) {
	li, _ := r.Context().Value(listenerKey).(*listenerInfo)
	pa := r.Header.Get("Proxy-Authorization")
	if li != nil && li.bound != nil {
		if pa == "" {
			return *li.bound, nil
		}
		// A command of a sandbox session names itself with its exec credential: the
		// listener still says which sandbox it is; the credential says which command.
		if p.opts.Execs != nil {
			if user, secret, ok := basicCredentials(pa); ok {
				if exec, ok := p.opts.Execs.ExecOf(li.bound.ID, user, secret); ok {
					id := *li.bound
					id.Exec = exec
					return id, nil
				}
			}
		}
		// A credential on a bound listener must name that same sandbox.
		id, err := p.lookupToken(r.Context(), pa)
		if err != nil {
			return identity.Identity{}, err
		}
		if id.ID != li.bound.ID {
			return identity.Identity{}, errAuth
		}
		return *li.bound, nil
	}
	if pa != "" {
		return p.lookupToken(r.Context(), pa)
	}
	if p.opts.RequireAuth {
		return identity.Identity{}, errAuth
	}
	return identity.Identity{ID: identity.DefaultID}, nil
}

func withIdentity(ctx context.Context, id identity.Identity) context.Context {
	return context.WithValue(ctx, identityKey, id)
}

func identityFrom(ctx context.Context) (identity.Identity, bool) {
	id, ok := ctx.Value(identityKey).(identity.Identity)
	return id, ok
}
