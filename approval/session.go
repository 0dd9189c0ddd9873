package approval

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Session is a sign-in to the approval page. The browser holds an opaque random id in a
// cookie; the store keeps only the id's SHA-256, the approver's name and when it ends, so a
// copied cookie stops working at sign-out or expiry, on every replica.
type Session struct {
	IDSHA256 string
	Approver string
	Created  time.Time
	Expires  time.Time
}

// Sessions keeps the approval page's sign-ins. It lives in the approval store because that
// is what every replica shares: a session made through one replica works on all of them,
// and a sign-out through one ends it on all of them.
type Sessions interface {
	// CreateSession records s, and drops sessions that have ended.
	CreateSession(ctx context.Context, s Session) error
	// LookupSession returns the session whose id hashes to idSHA256 if it has not ended at
	// now, else ErrNotFound.
	LookupSession(ctx context.Context, idSHA256 string, now time.Time) (Session, error)
	// DeleteSession ends a session; ending one that does not exist is not an error.
	DeleteSession(ctx context.Context, idSHA256 string) error
}

const sessionSchema = `;
CREATE TABLE IF NOT EXISTS airlock_approver_sessions (
	id_sha256 TEXT PRIMARY KEY,
	approver TEXT NOT NULL,
	created BIGINT NOT NULL,
	expires BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS airlock_approver_sessions_expires ON airlock_approver_sessions (expires)`

func (s *sqlStore) CreateSession(ctx context.Context, ses Session) error {
	if ses.IDSHA256 == "" || ses.Approver == "" {
		return errors.New("create session: no id or approver")
	}
	if _, err := s.db.ExecContext(ctx, s.q(`INSERT INTO airlock_approver_sessions (id_sha256, approver, created, expires)
		VALUES (?, ?, ?, ?)`), ses.IDSHA256, ses.Approver, nanos(ses.Created), nanos(ses.Expires)); err != nil {
		return fmt.Errorf("create session: %w", err)
	}
	if _, err := s.db.ExecContext(ctx, s.q(`DELETE FROM airlock_approver_sessions WHERE expires <= ?`), nanos(ses.Created)); err != nil {
		return fmt.Errorf("prune sessions: %w", err)
	}
	return nil
}

func (s *sqlStore) LookupSession(ctx context.Context, idSHA256 string, now time.Time) (Session, error) {
	var (
		ses              Session
		created, expires int64
	)
	err := s.db.QueryRowContext(ctx, s.q(`SELECT id_sha256, approver, created, expires FROM airlock_approver_sessions
		WHERE id_sha256 = ? AND expires > ?`), idSHA256, nanos(now)).Scan(&ses.IDSHA256, &ses.Approver, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, fmt.Errorf("session: %w", ErrNotFound)
	}
	if err != nil {
		return Session{}, fmt.Errorf("look up session: %w", err)
	}
	ses.Created, ses.Expires = fromNanos(created), fromNanos(expires)
	return ses, nil
}

func (s *sqlStore) DeleteSession(ctx context.Context, idSHA256 string) error {
	if _, err := s.db.ExecContext(ctx, s.q(`DELETE FROM airlock_approver_sessions WHERE id_sha256 = ?`), idSHA256); err != nil {
		return fmt.Errorf("end session: %w", err)
	}
	return nil
}

// sessionIDHash is what the store keeps of a session id.
func sessionIDHash(id string) string {
	s := sha256.Sum256([]byte("airlock-approver-session\x00" + id))
	return hex.EncodeToString(s[:])
}

// startSession signs approver in: a new random session id (returned, for the cookie) is
// recorded by its hash with an expiry.
func (s *Service) startSession(ctx context.Context, approver string) (string, error) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux.
	id := base64.RawURLEncoding.EncodeToString(b[:])
	now := s.now()
	err := s.store.CreateSession(ctx, Session{IDSHA256: sessionIDHash(id), Approver: approver,
		Created: now.UTC(), Expires: now.Add(s.cfg.SessionTTL.D()).UTC()})
	if err != nil {
		return "", err
	}
	return id, nil
}

// session returns the approver signed in with session id, if the session is live and the
// approver is still configured. ok is false for an unknown, ended or orphaned session; an
// error means the store could not say.
func (s *Service) session(ctx context.Context, id string) (approver string, ok bool, err error) {
	if id == "" {
		return "", false, nil
	}
	ses, err := s.store.LookupSession(ctx, sessionIDHash(id), s.now())
	if errors.Is(err, ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if !s.approverNames[ses.Approver] {
		return "", false, nil // removed from the configuration since
	}
	return ses.Approver, true, nil
}
