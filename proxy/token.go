package proxy

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/airlock-proxy/airlock/internal/identity"
)

// TokenOptions configure the per-sandbox proxy credentials the proxy issues.
//
// With no Keys (the default) credentials live in this process's memory: right for one
// proxy process. With Keys, a credential is self-verifying (HMAC-SHA256 over the sandbox
// id, its labels, issue and expiry time), so every replica holding the same keys accepts
// it, and revocations go to Revocations, which the replicas share (the approval store).
type TokenOptions struct {
	// Keys sign and verify credentials: the first signs, every one verifies (rotation).
	// Each must be at least MinTokenKeyLen bytes.
	Keys [][]byte
	// Revocations is the shared revocation list; required with Keys.
	Revocations Revocations
	// TTL is how long an issued credential is valid unless the issuer asks for less;
	// default DefaultTokenTTL for signed credentials, and no expiry for credentials in
	// memory (they end with the process).
	TTL time.Duration
	// RevocationCache is how long a replica trusts its last look-up that a sandbox's
	// credentials are not revoked: the bound on how long a credential revoked through another
	// replica may still work here. Default DefaultRevocationCache.
	RevocationCache time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Revocations is the revocation list shared by proxy replicas; the approval store
// (approval.Store) implements it. Errors make the proxy refuse the credential (fail closed).
type Revocations interface {
	RevokeCredentials(ctx context.Context, sandboxID string, until time.Time) error
	CredentialsRevoked(ctx context.Context, sandboxID string, now time.Time) (bool, error)
}

// Token defaults and limits.
const (
	DefaultTokenTTL        = 24 * time.Hour
	DefaultRevocationCache = time.Second
	MinTokenKeyLen         = 32
	maxLabels              = 32
	maxLabelKey            = 63
	maxLabelValue          = 256
	// revocationCheckTimeout bounds one look-up in the revocation list.
	revocationCheckTimeout = 2 * time.Second
	signedPrefix           = "v1."
)

// TokenError is a refused issue or revoke request; HTTPStatus says how the admin API
// answers it (400 for a malformed id or labels, 409 for an id already revoked, 503 when
// the revocation list is unavailable). Its text never holds a credential.
type TokenError struct {
	Status int
	Msg    string
	Err    error
}

func (e *TokenError) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}
func (e *TokenError) Unwrap() error   { return e.Err }
func (e *TokenError) HTTPStatus() int { return e.Status }

// ErrSandboxRevoked: credentials of that sandbox id were revoked; ids are not reused.
var ErrSandboxRevoked = errors.New("sandbox id was revoked")

// errCredentialUnchecked: the revocation list could not be asked, so a signed credential is
// refused (503), never let through unchecked.
var errCredentialUnchecked = errors.New("proxy credential could not be checked against the revocation list")

var labelKeyPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_./-]*$`)

// CheckIdentity refuses sandbox ids and labels the proxy does not issue credentials for:
// the id by identity.CheckID (1-63 lower-case letters, digits, '-'; not "default"), at
// most 32 labels with keys of letters, digits, '_', '.', '/', '-' (up to 63) and values of
// up to 256 printable characters.
func CheckIdentity(id identity.Identity) error {
	if err := checkSandboxID(id.ID); err != nil {
		return err
	}
	if len(id.Labels) > maxLabels {
		return &TokenError{Status: http.StatusBadRequest, Msg: fmt.Sprintf("%d labels: at most %d", len(id.Labels), maxLabels)}
	}
	for k, v := range id.Labels {
		if len(k) > maxLabelKey || !labelKeyPattern.MatchString(k) {
			return &TokenError{Status: http.StatusBadRequest, Msg: fmt.Sprintf("label key %q: want 1-%d letters, digits, '_', '.', '/' or '-'", k, maxLabelKey)}
		}
		if len(v) > maxLabelValue || strings.IndexFunc(v, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			return &TokenError{Status: http.StatusBadRequest, Msg: fmt.Sprintf("label %s: value must be at most %d printable characters", k, maxLabelValue)}
		}
	}
	return nil
}

// checkSandboxID is identity.CheckID as a 400 TokenError.
func checkSandboxID(id string) error {
	if err := identity.CheckID(id); err != nil {
		return &TokenError{Status: http.StatusBadRequest, Msg: "proxy credential", Err: err}
	}
	return nil
}

// tokens holds the proxy credentials: in memory (no keys), or signed with a shared
// revocation list.
type tokens struct {
	opts   TokenOptions
	ttlSet bool // TTL was configured (in-memory credentials otherwise never expire)

	mu   sync.RWMutex
	byID map[string]tokenEntry // in-memory mode: sandbox id → entry

	rev revocationCache // signed mode
}

type tokenEntry struct {
	hash    [32]byte
	id      identity.Identity
	expires time.Time
}

func (t *tokens) signed() bool { return len(t.opts.Keys) > 0 }

func (t *tokens) init(o TokenOptions) error {
	for i, k := range o.Keys {
		if len(k) < MinTokenKeyLen {
			return fmt.Errorf("proxy: token key %d is %d bytes, want at least %d", i+1, len(k), MinTokenKeyLen)
		}
	}
	if len(o.Keys) > 0 && o.Revocations == nil {
		return errors.New("proxy: signed tokens need a shared revocation list (TokenOptions.Revocations)")
	}
	t.ttlSet = o.TTL > 0
	if o.TTL <= 0 {
		o.TTL = DefaultTokenTTL
	}
	if o.RevocationCache <= 0 {
		o.RevocationCache = DefaultRevocationCache
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	t.opts = o
	t.rev = revocationCache{entries: map[string]*revEntry{}}
	return nil
}

// IssueToken issues a proxy credential for id with the default lifetime. A client presents
// it as Proxy-Authorization: Basic base64(id.ID + ":" + token), which is what
// http://ID:TOKEN@proxy:3128 in HTTP_PROXY makes clients send. In memory mode it replaces
// any earlier credential of id; signed credentials of one id are all valid until they
// expire or the id is revoked.
func (p *Proxy) IssueToken(ctx context.Context, id identity.Identity) (string, error) {
	tok, _, err := p.IssueTokenFor(ctx, id, 0)
	return tok, err
}

// IssueTokenFor is IssueToken with a lifetime (0, or more than TokenOptions.TTL, means
// TokenOptions.TTL); it also returns when the credential expires.
func (p *Proxy) IssueTokenFor(ctx context.Context, id identity.Identity, ttl time.Duration) (string, time.Time, error) {
	t := &p.tokens
	if err := CheckIdentity(id); err != nil {
		return "", time.Time{}, err
	}
	requested := ttl
	if ttl <= 0 || ttl > t.opts.TTL {
		ttl = t.opts.TTL
	}
	now := t.opts.Now()
	exp := now.Add(ttl).Truncate(time.Second)
	if !t.signed() {
		if !t.ttlSet && requested <= 0 {
			exp = time.Time{} // in memory and no lifetime asked for: until revoked
		}
		var b [24]byte
		_, _ = rand.Read(b[:])
		tok := hex.EncodeToString(b[:])
		t.mu.Lock()
		if t.byID == nil {
			t.byID = map[string]tokenEntry{}
		}
		t.byID[id.ID] = tokenEntry{hash: sha256.Sum256([]byte(tok)), id: id, expires: exp}
		t.mu.Unlock()
		return tok, exp, nil
	}
	revoked, err := t.opts.Revocations.CredentialsRevoked(ctx, id.ID, now)
	if err != nil {
		return "", time.Time{}, &TokenError{Status: http.StatusServiceUnavailable, Msg: "issue proxy credential: revocation list unavailable", Err: err}
	}
	if revoked {
		return "", time.Time{}, &TokenError{Status: http.StatusConflict, Msg: fmt.Sprintf("sandbox %s: its credentials were revoked; use a new sandbox id", id.ID), Err: ErrSandboxRevoked}
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	claims := tokenClaims{ID: id.ID, Labels: id.Labels, Issued: now.Unix(), Expires: exp.Unix(), Nonce: hex.EncodeToString(nonce[:])}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("issue proxy credential: %w", err)
	}
	body := signedPrefix + base64.RawURLEncoding.EncodeToString(payload)
	return body + "." + base64.RawURLEncoding.EncodeToString(mac(t.opts.Keys[0], body)), exp, nil
}

// RevokeToken makes the sandbox's proxy credentials useless: later requests with them get
// 407, on this proxy at once and, with signed credentials, on every replica sharing the
// revocation list within TokenOptions.RevocationCache.
func (p *Proxy) RevokeToken(ctx context.Context, sandboxID string) error {
	t := &p.tokens
	// An id no credential can have been issued for is a mistake (a second spelling of a
	// real id): say so rather than revoke nothing.
	if err := checkSandboxID(sandboxID); err != nil {
		return err
	}
	if !t.signed() {
		t.mu.Lock()
		delete(t.byID, sandboxID)
		t.mu.Unlock()
		return nil
	}
	// Until every credential issued so far has expired (the hour covers clocks that
	// disagree between replicas, and replicas configured with a longer TTL during a change).
	until := t.opts.Now().Add(t.opts.TTL + time.Hour)
	if err := t.opts.Revocations.RevokeCredentials(ctx, sandboxID, until); err != nil {
		return &TokenError{Status: http.StatusServiceUnavailable, Msg: "revoke proxy credential: revocation list unavailable", Err: err}
	}
	t.rev.markRevoked(sandboxID)
	return nil
}

// tokenClaims are what a signed credential says.
type tokenClaims struct {
	ID      string            `json:"sbx"`
	Labels  map[string]string `json:"lbl,omitempty"`
	Issued  int64             `json:"iat"`
	Expires int64             `json:"exp"`
	Nonce   string            `json:"n"`
}

func mac(key []byte, body string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte("airlock proxy credential\x00"))
	h.Write([]byte(body))
	return h.Sum(nil)
}

// check validates a credential presented for sandbox user.
func (t *tokens) check(ctx context.Context, user, tok string) (identity.Identity, error) {
	now := t.opts.Now()
	if !t.signed() {
		t.mu.RLock()
		e, found := t.byID[user]
		t.mu.RUnlock()
		h := sha256.Sum256([]byte(tok))
		if !found || subtle.ConstantTimeCompare(h[:], e.hash[:]) != 1 || (!e.expires.IsZero() && !now.Before(e.expires)) {
			return identity.Identity{}, errAuth
		}
		return e.id, nil
	}
	body, sig, ok := strings.Cut(strings.TrimPrefix(tok, signedPrefix), ".")
	if !ok || !strings.HasPrefix(tok, signedPrefix) {
		return identity.Identity{}, errAuth
	}
	body = signedPrefix + body
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return identity.Identity{}, errAuth
	}
	valid := false
	for _, k := range t.opts.Keys {
		if hmac.Equal(got, mac(k, body)) {
			valid = true
		}
	}
	if !valid {
		return identity.Identity{}, errAuth
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(body, signedPrefix))
	if err != nil {
		return identity.Identity{}, errAuth
	}
	var c tokenClaims
	if err := json.Unmarshal(payload, &c); err != nil {
		return identity.Identity{}, errAuth
	}
	if c.ID != user || now.Unix() >= c.Expires {
		return identity.Identity{}, errAuth
	}
	revoked, err := t.rev.revoked(ctx, t.opts, user)
	if err != nil {
		return identity.Identity{}, err
	}
	if revoked {
		return identity.Identity{}, errAuth
	}
	return identity.Identity{ID: c.ID, Labels: c.Labels}, nil
}

// revocationCache remembers, per sandbox, the last answer of the revocation list. A
// "not revoked" answer is trusted for RevocationCache after the look-up started, so a
// revocation committed at time R is honoured by every request after R+RevocationCache; a
// "revoked" answer is final. A failed look-up with no fresh answer refuses the request.
type revocationCache struct {
	mu      sync.Mutex
	entries map[string]*revEntry
}

type revEntry struct {
	mu      sync.Mutex // one look-up per sandbox at a time
	checked time.Time  // when the last successful look-up started
	revoked bool
}

// maxRevocationEntries triggers dropping stale entries.
const maxRevocationEntries = 10000

func (c *revocationCache) entry(id string, now time.Time, fresh time.Duration) *revEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[id]
	if e == nil {
		if len(c.entries) >= maxRevocationEntries {
			for k, old := range c.entries {
				if old.mu.TryLock() {
					if now.Sub(old.checked) >= fresh {
						delete(c.entries, k) // a revoked entry is looked up again: the list still says so
					}
					old.mu.Unlock()
				}
			}
		}
		e = &revEntry{}
		c.entries[id] = e
	}
	return e
}

func (c *revocationCache) markRevoked(id string) {
	e := c.entry(id, time.Now(), 0)
	e.mu.Lock()
	e.revoked = true
	e.mu.Unlock()
}

func (c *revocationCache) revoked(ctx context.Context, o TokenOptions, id string) (bool, error) {
	now := o.Now()
	e := c.entry(id, now, o.RevocationCache)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.revoked {
		return true, nil
	}
	if !e.checked.IsZero() && now.Sub(e.checked) < o.RevocationCache {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, revocationCheckTimeout)
	defer cancel()
	start := o.Now()
	revoked, err := o.Revocations.CredentialsRevoked(ctx, id, start)
	if err != nil {
		return false, fmt.Errorf("%w: %w", errCredentialUnchecked, err)
	}
	e.checked, e.revoked = start, revoked
	return revoked, nil
}
