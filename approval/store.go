package approval

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Errors of a Store and of deciding.
var (
	// ErrNotFound: no record has that id.
	ErrNotFound = errors.New("approval not found")
	// ErrDecided: the record was already decided, expired or cancelled (the API answers 409).
	ErrDecided = errors.New("approval already decided")
	// ErrBodyGone: the record exists but its body is not kept (it has ended; the API
	// answers 410).
	ErrBodyGone = errors.New("approval body not kept")
)

// Store keeps approval records. Implementations must be safe for concurrent use and may be
// shared by several airlock replicas: every state change is a conditional update of a
// pending record, so exactly one decision wins.
type Store interface {
	// Create inserts a new record with the exact body it holds. A record created already
	// ended (a retry that used a grant) is stored as Record.Ended, without its body.
	Create(ctx context.Context, r Record, body []byte) error
	// Get returns one record or ErrNotFound.
	Get(ctx context.Context, id string) (Record, error)
	// Body returns a record's exact body: ErrNotFound for an unknown id, ErrBodyGone when
	// it is not kept (an ended record drops it).
	Body(ctx context.Context, id string) ([]byte, error)
	// List returns records, newest first.
	List(ctx context.Context, f ListFilter) ([]Record, error)
	// Decide moves a pending record to d.State. A record that is not pending is returned
	// with ErrDecided; an unknown id gives ErrNotFound. Ending drops the body, the body
	// preview and the header values (Record.Ended): a sandbox must not fill the store.
	Decide(ctx context.Context, id string, d Decision) (Record, error)
	// Decided returns those of ids that are no longer pending.
	Decided(ctx context.Context, ids []string) ([]Record, error)
	// UseGrant marks the newest unused approval matching g as used by g.UsedBy and returns
	// it; ok is false when there is none.
	UseGrant(ctx context.Context, g GrantQuery) (r Record, ok bool, err error)
	// ExpireDue moves pending records whose Expires is before now to expired (as Decide).
	ExpireDue(ctx context.Context, now time.Time) (int, error)
	// Prune deletes ended records decided before before (approvals.retention) and returns
	// how many; pending records are never pruned.
	Prune(ctx context.Context, before time.Time) (int, error)
	// CredentialRevocations: the shared list of revoked proxy credentials.
	CredentialRevocations
	// Sessions: the approval page's sign-ins, shared by every replica.
	Sessions
	// Close releases the store.
	Close() error
}

// ListFilter selects records; zero fields select everything.
type ListFilter struct {
	State State
	Limit int // 0: 500
}

// Decision ends a pending record.
type Decision struct {
	State   State // any state but pending
	By      string
	Comment string
	At      time.Time
}

// GrantQuery finds a recent approval that a retried request may reuse.
type GrantQuery struct {
	RequestSHA256 string
	Sandbox       string
	Since         time.Time // decided at or after
	UsedBy        string    // id of the retry's record
}

// OpenStore opens "sqlite:PATH" or "postgres://…" (also "postgresql://…") and creates the
// schema when missing.
func OpenStore(ctx context.Context, dsn string) (Store, error) {
	kind, rest, err := parseStoreDSN(dsn)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "sqlite":
		return openSQLite(ctx, rest)
	default:
		return openPostgres(ctx, rest)
	}
}

// SQLitePath is the file of a "sqlite:PATH" store address; ok is false for any other.
func SQLitePath(dsn string) (path string, ok bool) {
	kind, rest, err := parseStoreDSN(dsn)
	if err != nil || kind != "sqlite" {
		return "", false
	}
	return rest, true
}

// CheckStore parses a store address as OpenStore does before it connects (for
// PostgreSQL, pgx's parsing: its options, and the TLS files they name, which it reads),
// without connecting or writing. `airlock proxy --check` runs it.
func CheckStore(dsn string) error {
	kind, _, err := parseStoreDSN(dsn)
	if err != nil || kind != "postgres" {
		return err
	}
	if _, err := pgx.ParseConfig(dsn); err != nil {
		// pgx errors quote the connection string: only a file's error is passed on.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return fmt.Errorf("%s: %w; want the files its options name readable", redactDSN(dsn), pe)
		}
		return fmt.Errorf("%s is not a valid PostgreSQL address; want a URL such as postgres://HOST:5432/airlock with valid options", redactDSN(dsn))
	}
	return nil
}

func parseStoreDSN(dsn string) (kind, rest string, err error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		p := strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "//")
		if p == "" {
			return "", "", errors.New(`want "sqlite:PATH", got no path`)
		}
		return "sqlite", p, nil
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		// A malformed URL is a config problem, not a failure at start. (url errors quote
		// the address, password and all: not passed on.)
		if _, err := url.Parse(dsn); err != nil {
			return "", "", fmt.Errorf("%s is not a valid PostgreSQL address; want a URL such as postgres://HOST:5432/airlock", redactDSN(dsn))
		}
		return "postgres", dsn, nil
	}
	return "", "", fmt.Errorf(`want "sqlite:PATH" or "postgres://…", got %q`, redactDSN(dsn))
}

// redactDSN hides a password in a store address for error messages.
func redactDSN(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		if at := strings.LastIndex(dsn, "@"); at > i {
			return dsn[:i+3] + "[redacted]" + dsn[at:]
		}
	}
	return dsn
}
