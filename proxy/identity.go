package proxy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"sync"

	"github.com/airlock-proxy/airlock/internal/identity"
)

// errAuth is a missing, malformed, unknown or revoked proxy credential.
var errAuth = errors.New("proxy credential required")

// tokens holds the per-sandbox proxy credentials the proxy issued. Only a hash of each
// token is kept.
type tokens struct {
	mu   sync.RWMutex
	byID map[string]tokenEntry // sandbox id → entry
}

type tokenEntry struct {
	hash [32]byte
	id   identity.Identity
}

// IssueToken issues a proxy credential for id, replacing any earlier one. A client presents
// it as Proxy-Authorization: Basic base64(id.ID + ":" + token), which is what
// http://ID:TOKEN@proxy:3128 in HTTP_PROXY makes clients send.
func (p *Proxy) IssueToken(id identity.Identity) string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	p.tokens.mu.Lock()
	if p.tokens.byID == nil {
		p.tokens.byID = map[string]tokenEntry{}
	}
	p.tokens.byID[id.ID] = tokenEntry{hash: sha256.Sum256([]byte(tok)), id: id}
	p.tokens.mu.Unlock()
	return tok
}

// RevokeToken makes the sandbox's proxy credential useless: later requests with it get 407.
func (p *Proxy) RevokeToken(sandboxID string) {
	p.tokens.mu.Lock()
	delete(p.tokens.byID, sandboxID)
	p.tokens.mu.Unlock()
}

// lookupToken checks a Proxy-Authorization value.
func (p *Proxy) lookupToken(header string) (identity.Identity, error) {
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
	p.tokens.mu.RLock()
	e, found := p.tokens.byID[user]
	p.tokens.mu.RUnlock()
	h := sha256.Sum256([]byte(tok))
	if !found || subtle.ConstantTimeCompare(h[:], e.hash[:]) != 1 {
		return identity.Identity{}, errAuth
	}
	return e.id, nil
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
		// A credential on a bound listener must name that same sandbox.
		id, err := p.lookupToken(pa)
		if err != nil || id.ID != li.bound.ID {
			return identity.Identity{}, errAuth
		}
		return *li.bound, nil
	}
	if pa != "" {
		return p.lookupToken(pa)
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
