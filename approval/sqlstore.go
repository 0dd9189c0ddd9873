package approval

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// sqlStore is the Store on database/sql, for SQLite and PostgreSQL alike. Times are stored
// as Unix nanoseconds (0: unset) so both dialects read them the same way.
type sqlStore struct {
	db       *sql.DB
	postgres bool // placeholders $n instead of ?
}

// schema creates the tables when missing; BLOB is the dialect's byte-string type.
const schema = `CREATE TABLE IF NOT EXISTS airlock_approvals (
	id TEXT PRIMARY KEY,
	state TEXT NOT NULL,
	sandbox TEXT NOT NULL,
	labels TEXT NOT NULL,
	method TEXT NOT NULL,
	url TEXT NOT NULL,
	content_type TEXT NOT NULL,
	body_preview TEXT NOT NULL,
	body_size BIGINT NOT NULL,
	body_truncated BOOLEAN NOT NULL,
	body_sha256 TEXT NOT NULL,
	request_sha256 TEXT NOT NULL,
	rule TEXT NOT NULL,
	reason TEXT NOT NULL,
	credentials TEXT NOT NULL,
	created BIGINT NOT NULL,
	expires BIGINT NOT NULL,
	decided_by TEXT NOT NULL,
	decided_at BIGINT NOT NULL,
	comment TEXT NOT NULL,
	retry_of TEXT NOT NULL,
	reused_by TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS airlock_approvals_state ON airlock_approvals (state, expires);
CREATE INDEX IF NOT EXISTS airlock_approvals_request ON airlock_approvals (request_sha256);
CREATE INDEX IF NOT EXISTS airlock_approvals_created ON airlock_approvals (created);
CREATE INDEX IF NOT EXISTS airlock_approvals_decided ON airlock_approvals (decided_at);` + revocationSchema + sessionSchema

// addedColumns are columns added after the first release, with their definitions: a store
// created by an older airlock gets them at open (ALTER TABLE … ADD COLUMN).
var addedColumns = [...][2]string{
	{"headers", "TEXT NOT NULL DEFAULT '{}'"},
	{"warnings", "TEXT NOT NULL DEFAULT '[]'"},
	{"calls", "TEXT NOT NULL DEFAULT 'null'"},
	// body is the exact held body; NULL once it is not kept (expired, disconnected).
	{"body", "BLOB"},
}

const columns = `id, state, sandbox, labels, method, url, content_type, body_preview, body_size,
	body_truncated, body_sha256, request_sha256, rule, reason, credentials, created, expires,
	decided_by, decided_at, comment, retry_of, reused_by, headers, warnings, calls`

// migrate creates the schema and adds the columns an older store lacks. blob is the
// dialect's byte-string type; hasColumn reports whether airlock_approvals has a column.
func migrate(ctx context.Context, tx *sql.Tx, blob string, hasColumn func(string) (bool, error)) error {
	if _, err := tx.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	for _, c := range addedColumns {
		ok, err := hasColumn(c[0])
		if err != nil {
			return fmt.Errorf("inspect schema: %w", err)
		}
		if ok {
			continue
		}
		def := strings.ReplaceAll(c[1], "BLOB", blob)
		if _, err := tx.ExecContext(ctx, `ALTER TABLE airlock_approvals ADD COLUMN `+c[0]+` `+def); err != nil {
			return fmt.Errorf("add column %s: %w", c[0], err)
		}
	}
	return nil
}

// q rewrites ? placeholders to $1, $2, … for PostgreSQL.
func (s *sqlStore) q(query string) string {
	if !s.postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func (s *sqlStore) Create(ctx context.Context, r Record, body []byte) error {
	var enc [5][]byte
	var kept any = body
	switch {
	case r.State != StatePending:
		// Created already ended (a retry that used a grant): only the request's shape is kept.
		r = r.Ended()
		kept = nil
	case body == nil:
		kept = []byte{} // kept, and empty: NULL means "not kept"
	}
	for i, v := range []any{r.Labels, r.Credentials, r.Headers, r.Warnings, r.Calls} {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("store approval %s: %w", r.ID, err)
		}
		enc[i] = b
	}
	_, err := s.db.ExecContext(ctx, s.q(`INSERT INTO airlock_approvals (`+columns+`, body)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		r.ID, r.State, r.Sandbox, string(enc[0]), r.Method, r.URL, r.ContentType, r.BodyPreview,
		r.BodySize, r.BodyTruncated, r.BodySHA256, r.RequestSHA256, r.Rule, r.Reason,
		string(enc[1]), nanos(r.Created), nanos(r.Expires), r.DecidedBy, nanos(r.DecidedAt),
		r.Comment, r.RetryOf, r.ReusedBy, string(enc[2]), string(enc[3]), string(enc[4]), kept)
	if err != nil {
		return fmt.Errorf("store approval %s: %w", r.ID, err)
	}
	return nil
}

func (s *sqlStore) Body(ctx context.Context, id string) ([]byte, error) {
	var (
		gone int
		b    []byte
	)
	err := s.db.QueryRowContext(ctx, s.q(`SELECT CASE WHEN body IS NULL THEN 1 ELSE 0 END, body
		FROM airlock_approvals WHERE id = ?`), id).Scan(&gone, &b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("approval %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read body of approval %q: %w", id, err)
	}
	if gone == 1 {
		return nil, fmt.Errorf("approval %q: %w", id, ErrBodyGone)
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanRecord(sc scanner) (Record, error) {
	var (
		r                                       Record
		labels, creds, headers, warnings, calls string
		created, expires, decidedAt             int64
	)
	err := sc.Scan(&r.ID, &r.State, &r.Sandbox, &labels, &r.Method, &r.URL, &r.ContentType,
		&r.BodyPreview, &r.BodySize, &r.BodyTruncated, &r.BodySHA256, &r.RequestSHA256, &r.Rule,
		&r.Reason, &creds, &created, &expires, &r.DecidedBy, &decidedAt, &r.Comment, &r.RetryOf,
		&r.ReusedBy, &headers, &warnings, &calls)
	if err != nil {
		return Record{}, err
	}
	for _, f := range []struct {
		name string
		src  string
		dst  any
	}{{"labels", labels, &r.Labels}, {"credentials", creds, &r.Credentials},
		{"headers", headers, &r.Headers}, {"warnings", warnings, &r.Warnings}, {"calls", calls, &r.Calls}} {
		if err := json.Unmarshal([]byte(f.src), f.dst); err != nil {
			return Record{}, fmt.Errorf("approval %s: %s: %w", r.ID, f.name, err)
		}
	}
	r.Created, r.Expires, r.DecidedAt = fromNanos(created), fromNanos(expires), fromNanos(decidedAt)
	return r, nil
}

func (s *sqlStore) Get(ctx context.Context, id string) (Record, error) {
	row := s.db.QueryRowContext(ctx, s.q(`SELECT `+columns+` FROM airlock_approvals WHERE id = ?`), id)
	r, err := scanRecord(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Record{}, fmt.Errorf("approval %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Record{}, fmt.Errorf("read approval %q: %w", id, err)
	}
	return r, nil
}

func (s *sqlStore) query(ctx context.Context, query string, args ...any) ([]Record, error) {
	rows, err := s.db.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func (s *sqlStore) List(ctx context.Context, f ListFilter) ([]Record, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 500
	}
	var (
		out []Record
		err error
	)
	if f.State != "" {
		out, err = s.query(ctx, `SELECT `+columns+` FROM airlock_approvals WHERE state = ?
			ORDER BY created DESC LIMIT ?`, f.State, limit)
	} else {
		out, err = s.query(ctx, `SELECT `+columns+` FROM airlock_approvals
			ORDER BY created DESC LIMIT ?`, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	return out, nil
}

func (s *sqlStore) Decide(ctx context.Context, id string, d Decision) (Record, error) {
	if d.State == StatePending || !d.State.Valid() {
		return Record{}, fmt.Errorf("decide approval %q: not a final state: %q", id, d.State)
	}
	cur, err := s.Get(ctx, id)
	if err != nil {
		return Record{}, err
	}
	if !cur.Pending() {
		return cur, fmt.Errorf("approval %s is %s: %w", id, cur.State, ErrDecided)
	}
	n, err := s.end(ctx, cur, d)
	if err != nil {
		return Record{}, fmt.Errorf("decide approval %q: %w", id, err)
	}
	r, err := s.Get(ctx, id)
	if err != nil {
		return Record{}, err
	}
	if n == 0 {
		return r, fmt.Errorf("approval %s is %s: %w", id, r.State, ErrDecided)
	}
	return r, nil
}

// end moves cur, if it is still pending, to d's state and drops what an ended record does
// not keep (Record.Ended): header values, body preview and body. The headers of a pending
// record never change, so those read before are the ones replaced. It returns the number of
// records changed (0: someone else ended it first).
func (s *sqlStore) end(ctx context.Context, cur Record, d Decision) (int64, error) {
	ended := cur.Ended()
	headers, err := json.Marshal(ended.Headers)
	if err != nil {
		return 0, err
	}
	calls, err := json.Marshal(ended.Calls)
	if err != nil {
		return 0, err
	}
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE airlock_approvals
		SET state = ?, decided_by = ?, comment = ?, decided_at = ?, body = NULL, body_preview = '', headers = ?, calls = ?
		WHERE id = ? AND state = ?`), d.State, d.By, d.Comment, nanos(d.At), string(headers), string(calls), cur.ID, StatePending)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s *sqlStore) Decided(ctx context.Context, ids []string) ([]Record, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	args := make([]any, 0, len(ids)+1)
	args = append(args, StatePending)
	for _, id := range ids {
		args = append(args, id)
	}
	marks := strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")
	out, err := s.query(ctx, `SELECT `+columns+` FROM airlock_approvals
		WHERE state <> ? AND id IN (`+marks+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("poll approvals: %w", err)
	}
	return out, nil
}

func (s *sqlStore) UseGrant(ctx context.Context, g GrantQuery) (Record, bool, error) {
	var id string
	err := s.db.QueryRowContext(ctx, s.q(`UPDATE airlock_approvals SET reused_by = ?
		WHERE reused_by = '' AND id = (
			SELECT id FROM airlock_approvals
			WHERE request_sha256 = ? AND sandbox = ? AND state = ? AND reused_by = ''
				AND retry_of = '' AND decided_at >= ?
			ORDER BY decided_at DESC LIMIT 1)
		RETURNING id`), g.UsedBy, g.RequestSHA256, g.Sandbox, StateApproved, nanos(g.Since)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("look up retry grant: %w", err)
	}
	r, err := s.Get(ctx, id)
	if err != nil {
		return Record{}, false, err
	}
	return r, true, nil
}

func (s *sqlStore) ExpireDue(ctx context.Context, now time.Time) (int, error) {
	due, err := s.query(ctx, `SELECT `+columns+` FROM airlock_approvals WHERE state = ? AND expires < ?`,
		StatePending, nanos(now))
	if err != nil {
		return 0, fmt.Errorf("expire approvals: %w", err)
	}
	total := 0
	for _, r := range due {
		n, err := s.end(ctx, r, Decision{State: StateExpired, By: DecidedBySystem, Comment: "no decision before the timeout", At: now})
		if err != nil {
			return total, fmt.Errorf("expire approval %s: %w", r.ID, err)
		}
		total += int(n)
	}
	return total, nil
}

func (s *sqlStore) Prune(ctx context.Context, before time.Time) (int, error) {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM airlock_approvals WHERE state <> ? AND decided_at < ?`),
		StatePending, nanos(before))
	if err != nil {
		return 0, fmt.Errorf("prune approvals: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("prune approvals: %w", err)
	}
	return int(n), nil
}

func (s *sqlStore) Close() error { return s.db.Close() }
