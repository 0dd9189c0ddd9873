package secrets

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Options configure a Broker. Zero values mean the documented default.
type Options struct {
	Vault       VaultConfig
	Credentials map[string]CredentialConfig
	// Logger receives the broker's logs (never a value); nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// DefaultTTL is how long a value without a lease (KV, env, file) is cached; zero means 5m.
	DefaultTTL time.Duration
	// RenewBefore is the most a credential is renewed or re-fetched ahead of its end; it is
	// also limited to a third of the credential's lifetime. Zero means 5m.
	RenewBefore time.Duration
	// ExpiryMargin: a cached credential is not handed out this close to its end, so that it
	// does not expire in flight; old leases are revoked this long after being replaced.
	// Zero means 5s (at most a tenth of the lifetime).
	ExpiryMargin time.Duration
	// SweepInterval is how often cached credentials are checked for renewal and expiry;
	// zero means 5s.
	SweepInterval time.Duration
	// WrapTransport, if set, wraps the Vault client's HTTP transport (metrics, tests).
	WrapTransport func(http.RoundTripper) http.RoundTripper
	// OnFetch, if set, is called after each credential lookup: cached says whether the
	// cache answered; err is nil on success.
	OnFetch func(name string, cached bool, err error)
	// Journal, if set, keeps what revokes each Vault lease and token the broker issues
	// (never a value), so that a successor can revoke what a crashed process left
	// (RevokeLeft). A credential whose lease cannot be recorded is refused.
	Journal Journal
}

// Broker attaches credentials to outbound requests. It implements the proxy's
// CredentialSource and the sandbox module's Revoker.
type Broker struct {
	o     Options
	log   *slog.Logger
	creds map[string]*credential
	vault *vaultClient // nil when no credential comes from Vault

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	sf     singleflight.Group
	wg     sync.WaitGroup

	mu         sync.Mutex
	cache      map[cacheKey]*entry
	refreshing map[cacheKey]bool
	retired    []*entry
	revoked    map[string]revokeMark // sandboxes revoked recently
	revokeGen  uint64
	closed     bool
}

type credential struct {
	name string
	cfg  CredentialConfig
	inj  *injector
}

type cacheKey struct{ sandbox, name string }

type revokeMark struct {
	gen uint64
	at  time.Time
}

// New validates the configuration, authenticates to Vault when a credential needs it, and
// starts the renewal loop. Close stops it and revokes what was issued.
func New(ctx context.Context, o Options) (*Broker, error) {
	if err := ValidateCredentials(o.Credentials); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.DefaultTTL <= 0 {
		o.DefaultTTL = 5 * time.Minute
	}
	if o.RenewBefore <= 0 {
		o.RenewBefore = 5 * time.Minute
	}
	if o.ExpiryMargin <= 0 {
		o.ExpiryMargin = 5 * time.Second
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = 5 * time.Second
	}
	b := &Broker{
		o: o, log: o.Logger.With("component", "secrets"), creds: map[string]*credential{},
		cache: map[cacheKey]*entry{}, refreshing: map[cacheKey]bool{}, revoked: map[string]revokeMark{},
	}
	needVault := false
	for name, c := range o.Credentials {
		inj, err := c.Inject.compile(name)
		if err != nil {
			return nil, fmt.Errorf("credentials.%s.%w", name, err)
		}
		b.creds[name] = &credential{name: name, cfg: c, inj: inj}
		needVault = needVault || c.Vault != nil
	}
	if needVault {
		if err := o.Vault.Validate(); err != nil {
			return nil, err
		}
		v, err := newVaultClient(ctx, o.Vault, o.WrapTransport, b.log, b.dropAll)
		if err != nil {
			return nil, err
		}
		b.vault = v
	}
	b.ctx, b.cancel = context.WithCancel(context.WithoutCancel(ctx))
	b.wg.Add(1)
	go b.loop()
	return b, nil
}

// String describes the broker without any value.
func (b *Broker) String() string { return fmt.Sprintf("secrets.Broker{credentials: %d}", len(b.creds)) }

// Format implements fmt.Formatter so that no verb prints the cache.
func (b *Broker) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(b.String())) }

// LogValue implements slog.LogValuer.
func (b *Broker) LogValue() slog.Value { return slog.StringValue(b.String()) }

// Attach sets every named credential on r.Out, replacing whatever the client sent in the same
// place (and any Proxy-Authorization), and returns a Scrubber for the response (nil when
// r.Names is empty). On error nothing is set and the error is an *Error.
// Configured reports whether the config defines the credential name (whether or not it
// can be fetched now).
func (b *Broker) Configured(name string) bool {
	_, ok := b.creds[name]
	return ok
}

func (b *Broker) Attach(ctx context.Context, r AttachRequest) (Scrubber, error) {
	if r.Out == nil {
		return nil, errors.New("attach: no outbound request")
	}
	type todo struct {
		c *credential
		r rendered
	}
	var all []todo
	for _, name := range r.Names {
		if slices.ContainsFunc(all, func(t todo) bool { return t.c.name == name }) {
			continue
		}
		c, ok := b.creds[name]
		if !ok {
			err := &Error{Credential: name, Status: http.StatusInternalServerError, Reason: "not configured on this proxy (the policy names a credential the config does not define)"}
			b.hook(name, false, err)
			return nil, err
		}
		rd, err := b.get(ctx, r.SandboxID, c)
		if err != nil {
			return nil, err
		}
		all = append(all, todo{c, rd})
	}
	if len(all) == 0 {
		return nil, nil
	}
	var scrub []Secret
	for _, t := range all {
		t.c.inj.stripAndSet(r.Out, t.r)
		scrub = append(scrub, t.r.scrub...)
	}
	// An encoded body could carry an echoed value past the scrubber.
	r.Out.Header.Set("Accept-Encoding", "identity")
	s := all[0].r.scrubber
	if len(all) > 1 {
		s = newScrubber(scrub)
	}
	if s == nil {
		return nil, nil
	}
	return s.forRequest(), nil
}

func (b *Broker) hook(name string, cached bool, err error) {
	if b.o.OnFetch != nil {
		b.o.OnFetch(name, cached, err)
	}
}

// get returns the credential for (sandbox, c): cached, or fetched once for all concurrent
// callers.
func (b *Broker) get(ctx context.Context, sandbox string, c *credential) (rendered, error) {
	k := cacheKey{sandbox, c.name}
	now := b.o.Now()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return rendered{}, &Error{Credential: c.name, Status: http.StatusServiceUnavailable, Reason: "the credential broker is shutting down"}
	}
	e := b.cache[k]
	if e != nil && now.Before(e.usableUntil) {
		e.lastUsed = now
		if !now.Before(e.refreshAt) {
			b.startRefresh(k, c)
		}
		rd := e.r
		b.mu.Unlock()
		b.hook(c.name, true, nil)
		return rd, nil
	}
	b.mu.Unlock()

	ch := b.sf.DoChan(k.sandbox+"\x00"+k.name, func() (any, error) { return b.fetchAndStore(k, c, false) })
	var err error
	select {
	case res := <-ch:
		if res.Err == nil {
			b.hook(c.name, false, nil)
			return res.Val.(*entry).r, nil
		}
		err = res.Err
	case <-ctx.Done():
		err = ctx.Err()
	}
	// Fall back to a cached credential that has not yet expired.
	b.mu.Lock()
	e = b.cache[k]
	if e != nil && b.o.Now().Before(e.expires) {
		e.lastUsed = b.o.Now()
		rd := e.r
		b.mu.Unlock()
		b.log.Warn("credential fetch failed; using the cached one until it expires", "credential", c.name, "sandbox", sandbox, "error", sanitize(err).Error())
		b.hook(c.name, true, nil)
		return rd, nil
	}
	b.mu.Unlock()
	ce := classify(c.name, err)
	b.log.Warn("credential unavailable", "credential", c.name, "sandbox", sandbox, "status", ce.Status, "reason", ce.Reason)
	b.hook(c.name, false, ce)
	return rendered{}, ce
}

// fetchAndStore fetches a fresh credential and caches it, retiring the one it replaces.
// Unless force is set, a usable cached credential is returned instead: a caller that missed
// the cache just before another flight stored it must not cause a second Vault call.
func (b *Broker) fetchAndStore(k cacheKey, c *credential, force bool) (*entry, error) {
	b.mu.Lock()
	if e := b.cache[k]; !force && e != nil && b.o.Now().Before(e.usableUntil) {
		b.mu.Unlock()
		return e, nil
	}
	startGen := b.revokeGen
	b.mu.Unlock()
	e, err := b.fetch(b.ctx, c)
	if err != nil {
		return nil, err
	}
	e.key = k
	if err := b.record(e); err != nil {
		return nil, err
	}
	b.mu.Lock()
	if m, ok := b.revoked[k.sandbox]; (ok && m.gen > startGen) || b.closed {
		b.mu.Unlock()
		b.revoke(context.WithoutCancel(b.ctx), e)
		return nil, &Error{Credential: c.name, Status: http.StatusServiceUnavailable, Reason: "the sandbox ended while the credential was fetched"}
	}
	if old := b.cache[k]; old != nil {
		old.retireAt = b.o.Now().Add(b.margin(old.life))
		b.retired = append(b.retired, old)
	}
	b.cache[k] = e
	b.mu.Unlock()
	b.log.Debug("credential fetched", "credential", c.name, "sandbox", k.sandbox, "ttl", e.life.String(), "lease", e.leaseID != "" || !e.token.IsZero(), "renewable", e.renewable)
	return e, nil
}

// RevokeSandbox drops every credential cached for sandbox id and revokes its leases and
// tokens in Vault. Credentials being fetched for it when it is called are revoked on arrival.
func (b *Broker) RevokeSandbox(ctx context.Context, id string) error {
	b.mu.Lock()
	b.revokeGen++
	b.revoked[id] = revokeMark{gen: b.revokeGen, at: b.o.Now()}
	var gone []*entry
	for k, e := range b.cache {
		if k.sandbox == id {
			gone = append(gone, e)
			delete(b.cache, k)
		}
	}
	b.retired = slices.DeleteFunc(b.retired, func(e *entry) bool {
		if e.key.sandbox == id {
			gone = append(gone, e)
			return true
		}
		return false
	})
	b.mu.Unlock()
	var errs []error
	for _, e := range gone {
		if err := b.revoke(ctx, e); err != nil {
			errs = append(errs, err)
		}
	}
	// What earlier airlock processes issued for it (a sandbox taken over after a crash).
	// (An unreadable journal file is RevokeLeft's to report, not every sandbox's.)
	if _, _, err := b.revokeLeft(ctx, func(sandbox string) bool { return sandbox != id }); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("revoke sandbox %s: %w", id, errors.Join(errs...))
	}
	return nil
}

// Close stops renewal, revokes every lease and token the broker issued, and (for AppRole or
// Kubernetes auth) revokes the proxy's own token. Attach fails afterwards.
func (b *Broker) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	gone := b.retired
	for _, e := range b.cache {
		gone = append(gone, e)
	}
	b.cache, b.retired = map[cacheKey]*entry{}, nil
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
	var errs []error
	for _, e := range gone {
		if err := b.revoke(ctx, e); err != nil {
			errs = append(errs, err)
		}
	}
	if b.vault != nil {
		if err := b.vault.close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("revoke proxy token: %w", sanitize(err)))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("close credential broker: %w", errors.Join(errs...))
	}
	return nil
}

// dropAll forgets every cached credential without revoking: called after the proxy's own
// token was lost, which took its leases and child tokens with it.
func (b *Broker) dropAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cache, b.retired = map[cacheKey]*entry{}, nil
}

// Compile-time guards: the shapes of proxy.CredentialSource and sandbox.Revoker (declared by
// their users; this leaf package must not import them).
var (
	_ interface {
		Attach(context.Context, AttachRequest) (Scrubber, error)
	} = (*Broker)(nil)
	_ interface {
		RevokeSandbox(ctx context.Context, id string) error
	} = (*Broker)(nil)
)
