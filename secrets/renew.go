package secrets

import "time"

// loop renews, re-fetches and expires cached credentials until Close.
func (b *Broker) loop() {
	defer b.wg.Done()
	t := time.NewTicker(b.o.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
			b.sweep()
		}
	}
}

// sweep expires and revokes ended credentials, revokes replaced ones after their grace, and
// starts a refresh for every credential past its refresh point that was used since its
// last refresh (an idle credential is left to expire).
func (b *Broker) sweep() {
	now := b.o.Now()
	var gone []*entry
	b.mu.Lock()
	for k, e := range b.cache {
		if !now.Before(e.expires) {
			delete(b.cache, k)
			gone = append(gone, e)
			continue
		}
		if !now.Before(e.refreshAt) && e.lastUsed.After(e.refreshed) {
			if c := b.creds[k.name]; c != nil {
				b.startRefresh(k, c)
			}
		}
	}
	kept := b.retired[:0]
	for _, e := range b.retired {
		if now.Before(e.retireAt) {
			kept = append(kept, e)
		} else {
			gone = append(gone, e)
		}
	}
	b.retired = kept
	for id, m := range b.revoked {
		if now.Sub(m.at) > time.Hour {
			delete(b.revoked, id)
		}
	}
	b.mu.Unlock()
	for _, e := range gone {
		_ = b.revoke(b.ctx, e)
	}
}

// startRefresh renews or re-fetches k in the background, once at a time. Call with b.mu held.
func (b *Broker) startRefresh(k cacheKey, c *credential) {
	if b.refreshing[k] || b.closed {
		return
	}
	b.refreshing[k] = true
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		b.refresh(k, c)
		b.mu.Lock()
		delete(b.refreshing, k)
		b.mu.Unlock()
	}()
}

// refresh renews k's lease or token when that still helps, and otherwise fetches a new one.
// On failure the cached credential stays in use until it expires.
func (b *Broker) refresh(k cacheKey, c *credential) {
	b.mu.Lock()
	e := b.cache[k]
	b.mu.Unlock()
	if e == nil {
		return
	}
	if b.renew(k, e) {
		return
	}
	ch := b.sf.DoChan(k.sandbox+"\x00"+k.name, func() (any, error) { return b.fetchAndStore(k, c, true) })
	select {
	case res := <-ch:
		if res.Err != nil {
			b.log.Warn("credential refresh failed; the cached one stays in use until it expires", "credential", k.name, "sandbox", k.sandbox, "error", sanitize(res.Err).Error())
		}
	case <-b.ctx.Done():
	}
}

// renew extends e's lease or token in Vault. It reports false when e cannot be renewed or
// renewal would not extend it meaningfully (max_ttl or the lease's own maximum reached).
func (b *Broker) renew(k cacheKey, e *entry) bool {
	if !e.renewable || b.vault == nil {
		return false
	}
	now := b.o.Now()
	if !e.maxExpires.IsZero() && e.maxExpires.Sub(now) <= 2*b.margin(e.life) {
		return false
	}
	inc := int(e.leaseEnd.Sub(e.refreshed).Seconds())
	var granted time.Duration
	if e.leaseID != "" {
		s, err := b.vault.renewLease(b.ctx, e.leaseID, inc)
		if err != nil || s == nil {
			b.log.Info("lease renewal failed; fetching a new credential", "credential", k.name, "sandbox", k.sandbox, "error", errText(err))
			return false
		}
		granted = time.Duration(s.LeaseDuration) * time.Second
	} else {
		s, err := b.vault.renewToken(b.ctx, e.token.Reveal(), inc)
		if err != nil || s == nil || s.Auth == nil {
			b.log.Info("token renewal failed; fetching a new credential", "credential", k.name, "sandbox", k.sandbox, "error", errText(err))
			return false
		}
		granted = time.Duration(s.Auth.LeaseDuration) * time.Second
	}
	probe := entry{maxExpires: e.maxExpires}
	b.setLife(&probe, now, granted)
	if probe.expires.Sub(now) <= 2*b.margin(e.life) || !probe.expires.After(e.expires) {
		return false // Vault capped it: a new credential is needed
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cache[k] != e {
		return true // replaced or revoked meanwhile
	}
	e.leaseEnd, e.expires, e.life = probe.leaseEnd, probe.expires, probe.life
	e.usableUntil, e.refreshAt, e.refreshed = probe.usableUntil, probe.refreshAt, probe.refreshed
	b.log.Debug("credential renewed", "credential", k.name, "sandbox", k.sandbox, "ttl", e.life.String())
	return true
}

func errText(err error) string {
	if err == nil {
		return "empty answer"
	}
	return sanitize(err).Error()
}
