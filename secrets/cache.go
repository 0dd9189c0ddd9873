package secrets

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/vault/api"
)

// entry is one cached credential for one (sandbox, credential).
type entry struct {
	key       cacheKey
	r         rendered
	leaseID   string // a Vault lease to renew and revoke
	token     Secret // a Vault child token to renew and revoke
	accessor  string // token's accessor, which the journal keeps
	renewable bool
	life      time.Duration // lifetime granted at the last fetch or renewal (after max_ttl)

	fetched     time.Time
	maxExpires  time.Time // fetched + max_ttl; zero when unset
	leaseEnd    time.Time // when Vault ends the lease or token
	expires     time.Time // the credential is not used after this
	usableUntil time.Time // expires minus the in-flight margin
	refreshAt   time.Time // renew or re-fetch from here on
	refreshed   time.Time // last fetch or renewal
	lastUsed    time.Time
	retireAt    time.Time // for a replaced entry: revoke from here on
}

// margin is how close to its end a credential of lifetime d is neither handed out nor kept.
func (b *Broker) margin(d time.Duration) time.Duration { return min(b.o.ExpiryMargin, d/10) }

// setLife (re)computes the entry's times from a lease of length ttl granted at now.
func (b *Broker) setLife(e *entry, now time.Time, ttl time.Duration) {
	e.leaseEnd = now.Add(ttl)
	e.expires = e.leaseEnd
	if !e.maxExpires.IsZero() && e.maxExpires.Before(e.expires) {
		e.expires = e.maxExpires
	}
	e.life = e.expires.Sub(now)
	e.usableUntil = e.expires.Add(-b.margin(e.life))
	e.refreshAt = e.expires.Add(-min(b.o.RenewBefore, e.life/3))
	e.refreshed = now
}

// fetch reads credential c from its source and renders it.
func (b *Broker) fetch(ctx context.Context, c *credential) (*entry, error) {
	now := b.o.Now()
	e := &entry{fetched: now}
	if c.cfg.MaxTTL > 0 {
		e.maxExpires = now.Add(c.cfg.MaxTTL.Std())
	}
	var data map[string]any
	ttl := b.o.DefaultTTL
	switch {
	case c.cfg.Env != "":
		v := os.Getenv(c.cfg.Env)
		if strings.TrimSpace(v) == "" {
			return nil, &unavailableError{fmt.Errorf("environment variable %s of the proxy is not set", c.cfg.Env)}
		}
		data = map[string]any{"value": v}
	case c.cfg.File != "":
		raw, err := os.ReadFile(c.cfg.File)
		if err != nil {
			return nil, &unavailableError{fmt.Errorf("source file cannot be read: %w", pathless(err))}
		}
		data = map[string]any{"value": strings.TrimSpace(string(raw))}
	default:
		d, sec, err := b.vault.fetch(ctx, c.cfg.Vault)
		if err != nil {
			return nil, err
		}
		data = d
		ttl = b.leaseOf(e, sec, data)
	}
	r, err := c.inj.render(data)
	if err != nil {
		b.revoke(context.WithoutCancel(ctx), e)
		return nil, err
	}
	e.r = r
	b.setLife(e, now, ttl)
	return e, nil
}

// pathless drops the file name from a file error (the path is config, but keep texts short).
func pathless(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// leaseOf records the lease or token in sec on e and returns how long the credential lives.
func (b *Broker) leaseOf(e *entry, sec *api.Secret, data map[string]any) time.Duration {
	var ttl time.Duration
	switch {
	case sec.Auth != nil && sec.Auth.ClientToken != "":
		e.token = NewSecret(sec.Auth.ClientToken)
		e.accessor = sec.Auth.Accessor
		e.renewable = sec.Auth.Renewable
		ttl = time.Duration(sec.Auth.LeaseDuration) * time.Second
	case sec.LeaseID != "":
		e.leaseID = sec.LeaseID
		e.renewable = sec.Renewable
		ttl = time.Duration(sec.LeaseDuration) * time.Second
	default:
		// No lease: an identity token states its ttl in data; KV v1 gives a refresh hint.
		if d, ok := data["data"].(map[string]any); ok {
			if n, ok := d["ttl"].(json.Number); ok {
				if s, err := n.Int64(); err == nil && s > 0 {
					return time.Duration(s) * time.Second
				}
			}
		}
		if sec.LeaseDuration > 0 {
			return min(time.Duration(sec.LeaseDuration)*time.Second, b.o.DefaultTTL)
		}
		return b.o.DefaultTTL
	}
	if ttl <= 0 {
		ttl = b.o.DefaultTTL
	}
	return ttl
}

// revoke ends e's lease or token in Vault, unless Vault already ended it.
func (b *Broker) revoke(ctx context.Context, e *entry) error {
	if b.vault == nil || (e.leaseID == "" && e.token.IsZero()) {
		return nil
	}
	if !e.leaseEnd.IsZero() && !b.o.Now().Before(e.leaseEnd) {
		b.forget(e)
		return nil
	}
	var err error
	if e.leaseID != "" {
		err = b.vault.revokeLease(ctx, e.leaseID)
	} else {
		err = b.vault.revokeToken(ctx, e.token.Reveal())
	}
	if err != nil && !isStatus(err, http.StatusBadRequest) { // 400: already gone
		err = fmt.Errorf("revoke %s for sandbox %s: %w", e.key.name, e.key.sandbox, sanitize(err))
		b.log.Warn("credential revocation failed", "credential", e.key.name, "sandbox", e.key.sandbox, "error", err.Error())
		return err
	}
	b.log.Debug("credential revoked", "credential", e.key.name, "sandbox", e.key.sandbox)
	b.forget(e)
	return nil
}

// Format implements fmt.Formatter: fmt cannot reach Secret's methods through unexported
// fields, so types holding secrets in unexported fields print themselves.
func (e entry) Format(f fmt.State, _ rune) {
	_, _ = fmt.Fprintf(f, "secrets.entry{sandbox: %q, credential: %q, value: %s}", e.key.sandbox, e.key.name, redacted)
}
