package approval

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// schemaLock is the advisory lock key under which replicas create the schema one at a time.
const schemaLock = 0x61697231 // "air1"

// openPostgres connects to PostgreSQL with pgx and creates the schema when missing.
func openPostgres(ctx context.Context, dsn string) (Store, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx errors may quote the connection string; do not pass them on.
		return nil, fmt.Errorf("open approval store %s: invalid PostgreSQL address", redactDSN(dsn))
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(16)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open approval store %s: %w", redactDSN(dsn), err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, schemaLock); err != nil {
		db.Close()
		return nil, fmt.Errorf("open approval store %s: lock schema: %w", redactDSN(dsn), err)
	}
	has := func(col string) (bool, error) {
		var n int
		err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = 'airlock_approvals' AND column_name = $1`, col).Scan(&n)
		return n > 0, err
	}
	if err := migrate(ctx, tx, "BYTEA", has); err != nil {
		db.Close()
		return nil, fmt.Errorf("open approval store %s: %w", redactDSN(dsn), err)
	}
	if err := tx.Commit(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open approval store %s: create schema: %w", redactDSN(dsn), err)
	}
	return &sqlStore{db: db, postgres: true}, nil
}
