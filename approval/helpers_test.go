package approval

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/testkit/pgtest"
)

// storeKind opens a fresh, empty store address of one kind.
type storeKind struct {
	name string
	dsn  func(t *testing.T) string
}

func storeKinds() []storeKind {
	return []storeKind{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "approvals.db") }},
		{"postgres", postgresDSN},
	}
}

// postgresDSN creates a database for this test on $AIRLOCK_TEST_POSTGRES and drops it at
// cleanup; the test is skipped when the variable is unset.
func postgresDSN(t *testing.T) string { return pgtest.Database(t) }

func openTestStore(t *testing.T, dsn string) Store {
	t.Helper()
	st, err := OpenStore(context.Background(), dsn)
	if err != nil {
		t.Fatalf("OpenStore: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// newTestService starts a Service on dsn with fast polling and notification retries.
func newTestService(t *testing.T, dsn string, cfg Config, opts ...func(*Options)) *Service {
	t.Helper()
	cfg.Store = dsn
	o := Options{Config: cfg, PollInterval: 20 * time.Millisecond, NotifyBackoff: time.Millisecond}
	for _, f := range opts {
		f(&o)
	}
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// holdResult is the outcome of a Hold run in the background.
type holdResult struct {
	res Result
	err error
}

func holdAsync(ctx context.Context, s *Service, r Request) <-chan holdResult {
	ch := make(chan holdResult, 1)
	go func() {
		res, err := s.Hold(ctx, r)
		ch <- holdResult{res, err}
	}()
	return ch
}

// nextCreated waits for the next "created" event.
func nextCreated(t *testing.T, ev <-chan Event) Record {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case e, ok := <-ev:
			if !ok {
				t.Fatal("event stream closed")
			}
			if e.Type == EventCreated {
				return e.Record
			}
		case <-deadline:
			t.Fatal("no approval was created within 30s")
		}
	}
}

// waitHold waits for a background Hold to return.
func waitHold(t *testing.T, ch <-chan holdResult) holdResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("Hold did not return within 30s")
		return holdResult{}
	}
}

func sampleRequest(body string) Request {
	return Request{
		SandboxID: "sbx-7f3a",
		Labels:    map[string]string{"task": "release-triage"},
		Method:    "POST",
		URL:       "https://api.github.com/repos/acme/app/issues?access_token=s3cr3t&state=open",
		Header:    map[string][]string{"Content-Type": {"application/json"}},
		Body:      []byte(body),
		Rule:      "github.write",
		Reason:    "writes to GitHub need a human",
		Creds:     []string{"github-write"},
	}
}
