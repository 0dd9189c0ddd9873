package approval

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"net/http"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

func testRecord(id string, created time.Time) Record {
	return Record{
		ID: id, State: StatePending, Sandbox: "sbx-1", Labels: map[string]string{"tenant": "acme"},
		Method: "POST", URL: "https://api.example.com/x?b=2&a=1", ContentType: "application/json",
		Headers:     http.Header{"Content-Type": {"application/json"}, "Cookie": {"a=1", "b=2"}},
		Warnings:    []string{`method override: header X-HTTP-Method-Override: "DELETE"`},
		BodyPreview: `{"a":1}`, BodySize: 7, BodySHA256: "b0d", RequestSHA256: "req-" + id,
		Rule: "r", Reason: "why", Credentials: []string{"gh"},
		Created: created.UTC(), Expires: created.Add(time.Minute).UTC(),
	}
}

// TestStore runs the Store contract against every kind (PostgreSQL when configured).
func TestStore(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			st := openTestStore(t, k.dsn(t))
			t0 := time.Unix(1_800_000_000, 123456789).UTC()

			a, b := testRecord("apr-a", t0), testRecord("apr-b", t0.Add(time.Second))
			body := []byte("{\"a\":1}\x00\xff")
			for _, r := range []Record{a, b} {
				if err := st.Create(ctx, r, body); err != nil {
					t.Fatalf("Create(%s): %v", r.ID, err)
				}
			}
			if err := st.Create(ctx, a, nil); err == nil {
				t.Error("Create of a duplicate id: got nil error, want one")
			}
			if got, err := st.Body(ctx, "apr-a"); err != nil || !bytes.Equal(got, body) {
				t.Errorf("Body: got %q, %v; want the exact bytes %q", got, err, body)
			}
			empty := testRecord("apr-empty", t0)
			if err := st.Create(ctx, empty, nil); err != nil {
				t.Fatal(err)
			}
			if got, err := st.Body(ctx, "apr-empty"); err != nil || len(got) != 0 {
				t.Errorf("Body of a bodyless request: got %q, %v; want empty, no error", got, err)
			}
			if _, err := st.Decide(ctx, "apr-empty", Decision{State: StateDenied, By: "oncall", At: t0}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Body(ctx, "apr-none"); !errors.Is(err, ErrNotFound) {
				t.Errorf("Body(unknown): got %v, want ErrNotFound", err)
			}
			got, err := st.Get(ctx, "apr-a")
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if !reflect.DeepEqual(got, a) {
				t.Errorf("Get round trip:\n got %+v\nwant %+v", got, a)
			}
			if _, err := st.Get(ctx, "apr-none"); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get(unknown): got %v, want ErrNotFound", err)
			}

			if _, err := st.Decide(ctx, "apr-b", Decision{State: StatePending, By: "x", At: t0}); err == nil {
				t.Error("Decide to pending: got nil error, want one")
			}
			list, err := st.List(ctx, ListFilter{State: StatePending})
			if err != nil || len(list) != 2 || list[0].ID != "apr-b" {
				t.Fatalf("List(pending): got %d records (first %v), err %v; want 2, newest apr-b first", len(list), ids(list), err)
			}

			d := Decision{State: StateApproved, By: "oncall", Comment: "ok", At: t0.Add(2 * time.Second)}
			dec, err := st.Decide(ctx, "apr-a", d)
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			if dec.State != StateApproved || dec.DecidedBy != "oncall" || !dec.DecidedAt.Equal(d.At) || dec.Comment != "ok" {
				t.Errorf("Decide: got %+v", dec)
			}
			again, err := st.Decide(ctx, "apr-a", Decision{State: StateDenied, By: "mallory", At: t0})
			if !errors.Is(err, ErrDecided) || again.State != StateApproved || again.DecidedBy != "oncall" {
				t.Errorf("second Decide: got %v, %q by %q; want ErrDecided and the first decision kept", err, again.State, again.DecidedBy)
			}
			if _, err := st.Decide(ctx, "apr-none", d); !errors.Is(err, ErrNotFound) {
				t.Errorf("Decide(unknown): got %v, want ErrNotFound", err)
			}

			decided, err := st.Decided(ctx, []string{"apr-a", "apr-b", "apr-none"})
			if err != nil || len(decided) != 1 || decided[0].ID != "apr-a" {
				t.Errorf("Decided: got %v, %v; want [apr-a]", ids(decided), err)
			}

			q := GrantQuery{RequestSHA256: "req-apr-a", Sandbox: "sbx-1", Since: t0, UsedBy: "apr-retry1"}
			for _, tc := range []struct {
				name string
				q    GrantQuery
				ok   bool
			}{
				{"other sandbox", GrantQuery{RequestSHA256: q.RequestSHA256, Sandbox: "sbx-2", Since: t0, UsedBy: "x"}, false},
				{"outside the window", GrantQuery{RequestSHA256: q.RequestSHA256, Sandbox: "sbx-1", Since: t0.Add(time.Hour), UsedBy: "x"}, false},
				{"other request", GrantQuery{RequestSHA256: "req-apr-b", Sandbox: "sbx-1", Since: t0, UsedBy: "x"}, false},
				{"first use", q, true},
				{"second use", GrantQuery{RequestSHA256: q.RequestSHA256, Sandbox: "sbx-1", Since: t0, UsedBy: "apr-retry2"}, false},
			} {
				g, ok, err := st.UseGrant(ctx, tc.q)
				if err != nil || ok != tc.ok {
					t.Errorf("UseGrant(%s): got ok=%v err=%v, want ok=%v", tc.name, ok, err, tc.ok)
				}
				if ok && (g.ID != "apr-a" || g.ReusedBy != "apr-retry1") {
					t.Errorf("UseGrant(%s): got %s reused by %q, want apr-a reused by apr-retry1", tc.name, g.ID, g.ReusedBy)
				}
			}

			n, err := st.ExpireDue(ctx, t0.Add(time.Minute+2*time.Second))
			if err != nil || n != 1 {
				t.Errorf("ExpireDue: got %d, %v; want 1 (apr-b)", n, err)
			}
			if r, _ := st.Get(ctx, "apr-b"); r.State != StateExpired || r.DecidedBy != DecidedBySystem {
				t.Errorf("after ExpireDue: apr-b is %q by %q, want expired by %s", r.State, r.DecidedBy, DecidedBySystem)
			}
			if r, _ := st.Get(ctx, "apr-a"); r.State != StateApproved {
				t.Errorf("after ExpireDue: apr-a is %q, want approved (decided records never expire)", r.State)
			}
			if _, err := st.Body(ctx, "apr-a"); !errors.Is(err, ErrBodyGone) {
				t.Errorf("Body of an approved record: got %v, want ErrBodyGone (an ended record keeps no body)", err)
			}
			if _, err := st.Body(ctx, "apr-b"); !errors.Is(err, ErrBodyGone) {
				t.Errorf("Body of an expired record: got %v, want ErrBodyGone (not kept)", err)
			}
		})
	}
}

func ids(rs []Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

// TestCredentialRevocations: a revocation is seen through a second handle on the same
// store (as another replica sees it), lasts until its time, keeps the later time when
// repeated, and concerns only its sandbox.
func TestCredentialRevocations(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			dsn := k.dsn(t)
			a, b := openTestStore(t, dsn), openTestStore(t, dsn)
			now := time.Now()
			revoked := func(st Store, id string, at time.Time) bool {
				t.Helper()
				ok, err := st.CredentialsRevoked(ctx, id, at)
				if err != nil {
					t.Fatalf("CredentialsRevoked(%s): %v", id, err)
				}
				return ok
			}
			if revoked(b, "sbx-1", now) {
				t.Fatal("sbx-1 revoked before anything was revoked")
			}
			if err := a.RevokeCredentials(ctx, "sbx-1", now.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if !revoked(b, "sbx-1", now) {
				t.Error("revocation through one handle not seen through the other")
			}
			if revoked(b, "sbx-2", now) {
				t.Error("revoking sbx-1 revoked sbx-2")
			}
			if revoked(b, "sbx-1", now.Add(2*time.Hour)) {
				t.Error("revocation still in force after its time")
			}
			// An earlier time does not shorten it; a later one extends it.
			if err := b.RevokeCredentials(ctx, "sbx-1", now.Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			if !revoked(a, "sbx-1", now.Add(30*time.Minute)) {
				t.Error("a second, shorter revocation shortened the first")
			}
			if err := b.RevokeCredentials(ctx, "sbx-1", now.Add(3*time.Hour)); err != nil {
				t.Fatal(err)
			}
			if !revoked(a, "sbx-1", now.Add(2*time.Hour)) {
				t.Error("a later revocation did not extend the first")
			}
			if err := a.RevokeCredentials(ctx, "", now.Add(time.Hour)); err == nil {
				t.Error("revoking an empty sandbox id: got nil error")
			}
		})
	}
}

// TestCredentialRevocationsFailWhenClosed: a store that cannot answer says so (the proxy
// then refuses the credential rather than letting it through).
func TestCredentialRevocationsFailWhenClosed(t *testing.T) {
	st, err := OpenStore(context.Background(), "sqlite:"+t.TempDir()+"/a.db")
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := st.CredentialsRevoked(context.Background(), "sbx-1", time.Now()); err == nil {
		t.Error("CredentialsRevoked on a closed store: got nil error")
	}
}

// TestStoreSessions: a session made through one handle is found through another (as another
// replica finds it) until it expires or is deleted; only its id's hash is stored.
func TestStoreSessions(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			dsn := k.dsn(t)
			a, b := openTestStore(t, dsn), openTestStore(t, dsn)
			t0 := time.Unix(1_800_000_000, 0).UTC()
			ses := Session{IDSHA256: sessionIDHash("id-1"), Approver: "oncall", Created: t0, Expires: t0.Add(time.Hour)}
			if err := a.CreateSession(ctx, ses); err != nil {
				t.Fatal(err)
			}
			got, err := b.LookupSession(ctx, ses.IDSHA256, t0.Add(time.Minute))
			if err != nil || got != ses {
				t.Errorf("LookupSession through the other handle: got %+v, %v; want %+v", got, err, ses)
			}
			if _, err := b.LookupSession(ctx, ses.IDSHA256, t0.Add(time.Hour)); !errors.Is(err, ErrNotFound) {
				t.Errorf("LookupSession at expiry: got %v, want ErrNotFound", err)
			}
			if _, err := b.LookupSession(ctx, sessionIDHash("id-2"), t0); !errors.Is(err, ErrNotFound) {
				t.Errorf("LookupSession(unknown): got %v, want ErrNotFound", err)
			}
			if err := b.DeleteSession(ctx, ses.IDSHA256); err != nil {
				t.Fatal(err)
			}
			if _, err := a.LookupSession(ctx, ses.IDSHA256, t0.Add(time.Minute)); !errors.Is(err, ErrNotFound) {
				t.Errorf("LookupSession after DeleteSession elsewhere: got %v, want ErrNotFound", err)
			}
			if err := a.DeleteSession(ctx, ses.IDSHA256); err != nil {
				t.Errorf("deleting an ended session again: %v", err)
			}
		})
	}
}

// oldSchema is the approvals table as the first release created it.
const oldSchema = `CREATE TABLE airlock_approvals (
	id TEXT PRIMARY KEY, state TEXT NOT NULL, sandbox TEXT NOT NULL, labels TEXT NOT NULL,
	method TEXT NOT NULL, url TEXT NOT NULL, content_type TEXT NOT NULL, body_preview TEXT NOT NULL,
	body_size BIGINT NOT NULL, body_truncated BOOLEAN NOT NULL, body_sha256 TEXT NOT NULL,
	request_sha256 TEXT NOT NULL, rule TEXT NOT NULL, reason TEXT NOT NULL, credentials TEXT NOT NULL,
	created BIGINT NOT NULL, expires BIGINT NOT NULL, decided_by TEXT NOT NULL, decided_at BIGINT NOT NULL,
	comment TEXT NOT NULL, retry_of TEXT NOT NULL, reused_by TEXT NOT NULL)`

// TestStoreMigratesOldSchema: a store created by the first release opens, keeps its records
// and gains the new columns.
func TestStoreMigratesOldSchema(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			var dsn string
			var db *sql.DB
			if k.name == "sqlite" {
				p := filepath.Join(t.TempDir(), "old.db")
				dsn = "sqlite:" + p
				var err error
				if db, err = sql.Open("sqlite", p); err != nil {
					t.Fatal(err)
				}
			} else {
				dsn = k.dsn(t)
				cfg, err := pgx.ParseConfig(dsn)
				if err != nil {
					t.Fatal(err)
				}
				db = stdlib.OpenDB(*cfg)
			}
			defer db.Close()
			if _, err := db.ExecContext(ctx, oldSchema); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, `INSERT INTO airlock_approvals VALUES ('apr-old', 'approved', 'sbx', '{}',
				'POST', 'https://h/', '', '', 0, false, 'b', 'r', 'rule', 'why', '[]', 1, 2, 'oncall', 3, '', '', '')`); err != nil {
				t.Fatal(err)
			}
			st := openTestStore(t, dsn)
			r, err := st.Get(ctx, "apr-old")
			if err != nil || r.State != StateApproved || r.DecidedBy != "oncall" {
				t.Fatalf("old record after migration: got %+v, %v", r, err)
			}
			if _, err := st.Body(ctx, "apr-old"); !errors.Is(err, ErrBodyGone) {
				t.Errorf("body of a record from before bodies were kept: got %v, want ErrBodyGone", err)
			}
			rec := testRecord("apr-new", time.Now())
			if err := st.Create(ctx, rec, []byte("x")); err != nil {
				t.Fatalf("Create after migration: %v", err)
			}
			if got, _ := st.Get(ctx, "apr-new"); !reflect.DeepEqual(got.Headers, rec.Headers) {
				t.Errorf("headers after migration: got %v, want %v", got.Headers, rec.Headers)
			}
		})
	}
}
