// Package pgtest gives tests a fresh PostgreSQL database on the server named by
// $AIRLOCK_TEST_POSTGRES (scripts/test.sh starts one with e2e/postgres.sh).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Env names the server's admin connection string.
const Env = "AIRLOCK_TEST_POSTGRES"

// Database creates a database for this test, drops it at cleanup and returns its
// connection string. The test is skipped when $AIRLOCK_TEST_POSTGRES is unset.
func Database(t testing.TB) string {
	t.Helper()
	admin := os.Getenv(Env)
	if admin == "" {
		t.Skipf("%s is unset: start a server with `eval \"$(bash e2e/postgres.sh start /tmp/airlock-pg)\"`", Env)
	}
	cfg, err := pgx.ParseConfig(admin)
	if err != nil {
		t.Fatalf("%s: %v", Env, err)
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "airlock_test_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := db.ExecContext(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("%s: %v", Env, err)
	}
	u.Path = "/" + name
	return u.String()
}
