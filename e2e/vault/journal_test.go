package vault_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/secrets"
)

// TestJournalRevokesWhatACrashLeft: the broker records every lease and child token it
// issues (lease id, token accessor: no value) before the credential is used; a second
// broker revokes in Vault what the first, once its process is gone, left, except the
// sandboxes it keeps (sessions taken over), which RevokeSandbox revokes when they end.
func TestJournalRevokesWhatACrashLeft(t *testing.T) {
	v := startVault(t)
	dir := filepath.Join(t.TempDir(), "leases")
	j, err := secrets.OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := newBroker(t, v, brokerOpts{mod: func(o *secrets.Options) { o.Journal = j }})
	lease1 := mustAttach(t, a, "sbx-1", "db-lease").Header.Get("X-Lease")
	tok1 := mustAttach(t, a, "sbx-1", "child").Header.Get("X-Vault-Token")
	mustAttach(t, a, "sbx-1", "db", "openai")
	lease2 := mustAttach(t, a, "sbx-2", "db-lease").Header.Get("X-Lease")

	// What a crash of a's process would leave: its journal, naming a process that is gone.
	left := filepath.Join(t.TempDir(), "left")
	os.Mkdir(left, 0o700)
	ents := journalRecords(dir)
	var all strings.Builder
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
		var rec map[string]any
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatal(err)
		}
		rec["pid"], rec["start"] = 999999999, 5
		b, _ = json.Marshal(rec)
		os.WriteFile(filepath.Join(left, e.Name()), b, 0o600)
	}
	// db-lease and db share one lease each per sandbox: sbx-1 db-lease, db, child; sbx-2 db-lease.
	if len(ents) != 4 {
		t.Errorf("journal: %d files, want 4 (three leases and one token):\n%s", len(ents), all.String())
	}
	for _, canary := range []string{dbPassword, openaiKey, tok1, v.root.Token()} {
		if strings.Contains(all.String(), canary) {
			t.Errorf("the journal holds the value %q:\n%s", canary, all.String())
		}
	}
	if !strings.Contains(all.String(), lease1) || !strings.Contains(all.String(), "token_accessor") {
		t.Errorf("journal %s: want the lease id and the token's accessor", all.String())
	}

	j2, _ := secrets.OpenJournal(left)
	b, _ := newBroker(t, v, brokerOpts{mod: func(o *secrets.Options) { o.Journal = j2 }})
	n, err := b.RevokeLeft(context.Background(), func(id string) bool { return id == "sbx-2" })
	if err != nil || n != 3 {
		t.Errorf("RevokeLeft: %d, %v; want 3 revoked", n, err)
	}
	if _, err := v.root.Sys().Lookup(lease1); err == nil {
		t.Errorf("lease of sbx-1: still in Vault after RevokeLeft")
	}
	if _, err := v.root.Auth().Token().Lookup(tok1); err == nil {
		t.Errorf("child token of sbx-1: still valid after RevokeLeft")
	}
	if _, err := v.root.Sys().Lookup(lease2); err != nil {
		t.Errorf("lease of the kept sbx-2: %v, want it untouched", err)
	}
	if err := b.RevokeSandbox(context.Background(), "sbx-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.root.Sys().Lookup(lease2); err == nil {
		t.Errorf("lease of sbx-2: still in Vault after its RevokeSandbox")
	}
	if ents := journalRecords(left); len(ents) != 0 {
		t.Errorf("the left journal holds %d files after everything was revoked", len(ents))
	}
	// a's own journal empties as a revokes what it issued.
	if err := a.Close(context.Background()); err != nil {
		t.Logf("Close after the successor revoked: %v", err)
	}
	if ents := journalRecords(dir); len(ents) != 0 {
		t.Errorf("journal holds %d files after Close", len(ents))
	}
}

// failingJournal refuses every Add, keeping what it was asked to record.
type failingJournal struct{ asked []secrets.Lease }

func (f *failingJournal) Add(l secrets.Lease) error {
	f.asked = append(f.asked, l)
	return errors.New("disk full")
}
func (f *failingJournal) Remove(secrets.Lease) error     { return nil }
func (f *failingJournal) Left() ([]secrets.Lease, error) { return nil, nil }

// TestJournalFailureRefuses: a credential whose lease cannot be recorded is not used, and
// its lease is revoked at once (a crash would leave it otherwise).
func TestJournalFailureRefuses(t *testing.T) {
	v := startVault(t)
	f := &failingJournal{}
	b, _ := newBroker(t, v, brokerOpts{mod: func(o *secrets.Options) { o.Journal = f }})
	_, _, err := attach(t, b, "sbx-1", "db")
	var se *secrets.Error
	if !errors.As(err, &se) || se.Status != 503 {
		t.Fatalf("Attach with a failing journal: %v, want a 503 *secrets.Error", err)
	}
	if len(f.asked) != 1 || f.asked[0].LeaseID == "" {
		t.Fatalf("journal asked for %+v, want one lease", f.asked)
	}
	if _, err := v.root.Sys().Lookup(f.asked[0].LeaseID); err == nil {
		t.Errorf("the refused credential's lease is still in Vault")
	}
	// A credential without a lease (KV) needs no journal.
	mustAttach(t, b, "sbx-1", "openai")
}

// journalRecords are the lease records in a journal directory (its owner files aside).
func journalRecords(dir string) []os.DirEntry {
	ents, _ := os.ReadDir(dir)
	return slices.DeleteFunc(ents, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), ".") })
}
