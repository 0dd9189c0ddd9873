package approval

import (
	"context"
	"fmt"
	"time"
)

// CredentialRevocations is the list of revoked per-sandbox proxy credentials. It lives in
// the approval store because that is the one thing every proxy replica already shares, so
// a credential revoked through one replica is refused by all of them.
//
// A revocation covers every credential ever issued for the sandbox id, until the time
// given (by then every such credential has expired, and the entry may be dropped).
type CredentialRevocations interface {
	// RevokeCredentials records that sandboxID's credentials are revoked until until. A
	// second revocation keeps the later of the two times.
	RevokeCredentials(ctx context.Context, sandboxID string, until time.Time) error
	// CredentialsRevoked reports whether sandboxID's credentials are revoked at now.
	CredentialsRevoked(ctx context.Context, sandboxID string, now time.Time) (bool, error)
}

const revocationSchema = `
CREATE TABLE IF NOT EXISTS airlock_credential_revocations (
	sandbox TEXT PRIMARY KEY,
	revoked_at BIGINT NOT NULL,
	revoked_until BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS airlock_credential_revocations_until ON airlock_credential_revocations (revoked_until)`

func (s *sqlStore) RevokeCredentials(ctx context.Context, sandboxID string, until time.Time) error {
	if sandboxID == "" {
		return fmt.Errorf("revoke credentials: empty sandbox id")
	}
	now := time.Now()
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO airlock_credential_revocations (sandbox, revoked_at, revoked_until)
		VALUES (?, ?, ?)
		ON CONFLICT (sandbox) DO UPDATE SET revoked_until = CASE
			WHEN excluded.revoked_until > airlock_credential_revocations.revoked_until THEN excluded.revoked_until
			ELSE airlock_credential_revocations.revoked_until END`), sandboxID, nanos(now), nanos(until))
	if err != nil {
		return fmt.Errorf("revoke credentials of sandbox %s: %w", sandboxID, err)
	}
	// Entries past their time protect nothing: every credential they covered has expired.
	if _, err := s.db.ExecContext(ctx, s.q(`DELETE FROM airlock_credential_revocations WHERE revoked_until < ?`), nanos(now)); err != nil {
		return fmt.Errorf("prune credential revocations: %w", err)
	}
	return nil
}

func (s *sqlStore) CredentialsRevoked(ctx context.Context, sandboxID string, now time.Time) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx, s.q(`SELECT COUNT(*) FROM airlock_credential_revocations
		WHERE sandbox = ? AND revoked_until > ?`), sandboxID, nanos(now)).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("look up credential revocation of sandbox %s: %w", sandboxID, err)
	}
	return n > 0, nil
}
