package secrets

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// lease is what the journal keeps of e; ok is false when e has nothing to revoke.
func (e *entry) lease() (Lease, bool) {
	l := Lease{Sandbox: e.key.sandbox, Credential: e.key.name, LeaseID: e.leaseID}
	if !e.token.IsZero() {
		l.Accessor = e.accessor
	}
	return l, e.leaseID != "" || !e.token.IsZero()
}

// record adds e's lease or token to the journal before the credential is used. When it
// cannot be recorded, e is revoked and refused: a crash would leave it unrevoked.
func (b *Broker) record(e *entry) error {
	l, ok := e.lease()
	if b.o.Journal == nil || !ok {
		return nil
	}
	err := errors.New("vault issued a token without an accessor")
	if l.valid() {
		err = b.o.Journal.Add(l)
	}
	if err == nil {
		return nil
	}
	b.log.Error("credential refused: its lease could not be recorded for revocation after a crash", "credential", e.key.name, "sandbox", e.key.sandbox, "error", err.Error())
	_ = b.revoke(context.WithoutCancel(b.ctx), e)
	return &Error{Credential: e.key.name, Status: http.StatusServiceUnavailable,
		Reason: "the proxy could not record the credential's lease for revocation (see the proxy's log)"}
}

// forget removes e's lease from the journal once Vault no longer holds it.
func (b *Broker) forget(e *entry) {
	l, ok := e.lease()
	if b.o.Journal == nil || !ok {
		return
	}
	if err := b.o.Journal.Remove(l); err != nil {
		b.log.Warn("a revoked lease stays in the lease journal", "credential", e.key.name, "sandbox", e.key.sandbox, "error", err.Error())
	}
}

// RevokeLeft revokes in Vault the leases and tokens that airlock processes which are no
// longer running left in the journal, except those of sandboxes for which keep is true (a
// sandbox session that was, or will be, taken over: its leases are revoked when it ends,
// by RevokeSandbox). It returns how many it revoked; those it could not revoke stay in the
// journal for the next try.
func (b *Broker) RevokeLeft(ctx context.Context, keep func(sandbox string) bool) (int, error) {
	n, listErr, err := b.revokeLeft(ctx, func(sandbox string) bool { return keep != nil && keep(sandbox) })
	return n, errors.Join(listErr, err)
}

// revokeLeft revokes the left leases not kept; listErr is about journal files that could
// not be read, err about revocations that failed.
func (b *Broker) revokeLeft(ctx context.Context, keep func(sandbox string) bool) (n int, listErr, err error) {
	if b.o.Journal == nil {
		return 0, nil, nil
	}
	left, listErr := b.o.Journal.Left()
	var errs []error
	for _, l := range left {
		if keep(l.Sandbox) {
			continue
		}
		if err := b.revokeLease(ctx, l); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, listErr, errors.Join(errs...)
}

// revokeLease revokes l in Vault and removes it from the journal.
func (b *Broker) revokeLease(ctx context.Context, l Lease) error {
	if b.vault == nil {
		return fmt.Errorf("revoke %s for sandbox %q: no credential of this proxy comes from Vault, so it cannot revoke what an earlier run left", l.Credential, l.Sandbox)
	}
	var err error
	if l.LeaseID != "" {
		err = b.vault.revokeLease(ctx, l.LeaseID)
	} else {
		err = b.vault.revokeAccessor(ctx, l.Accessor)
	}
	if err != nil && !isStatus(err, http.StatusBadRequest) { // 400: already gone
		return fmt.Errorf("revoke %s for sandbox %q left by an earlier run: %w", l.Credential, l.Sandbox, sanitize(err))
	}
	b.log.Info("revoked a credential an earlier airlock run left", "credential", l.Credential, "sandbox", l.Sandbox)
	return b.o.Journal.Remove(l)
}
