package approval

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite" // database/sql driver "sqlite" (pure Go)
)

// openSQLite opens (creating when missing, mode 0600) the SQLite database at path.
func openSQLite(ctx context.Context, path string) (Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open approval store sqlite:%s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open approval store sqlite:%s: %w", path, err)
	}
	f.Close()
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() +
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open approval store sqlite:%s: %w", path, err)
	}
	// One connection: SQLite serialises writers anyway, and this avoids SQLITE_BUSY between
	// this process's own connections.
	db.SetMaxOpenConns(1)
	if err := migrateSQLite(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("open approval store sqlite:%s: %w", path, err)
	}
	return &sqlStore{db: db}, nil
}

func migrateSQLite(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit this is a no-op
	has := func(col string) (bool, error) {
		var n int
		err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('airlock_approvals') WHERE name = ?`, col).Scan(&n)
		return n > 0, err
	}
	if err := migrate(ctx, tx, "BLOB", has); err != nil {
		return err
	}
	return tx.Commit()
}
