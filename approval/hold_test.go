package approval

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHoldDecisions: the way a held request ends is the way the record ends.
func TestHoldDecisions(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			for _, tc := range []struct {
				name    string
				timeout time.Duration
				decide  func(s *Service, id string) error
				state   State
				by      string
				comment string
			}{
				{"approve", time.Minute, func(s *Service, id string) error {
					_, err := s.Decide(context.Background(), id, StateApproved, "oncall", "looks right")
					return err
				}, StateApproved, "oncall", "looks right"},
				{"deny", time.Minute, func(s *Service, id string) error {
					_, err := s.Decide(context.Background(), id, StateDenied, "oncall", "not this repo")
					return err
				}, StateDenied, "oncall", "not this repo"},
				{"cancel", time.Minute, func(s *Service, id string) error {
					_, err := s.Decide(context.Background(), id, StateCancelled, "oncall", "asked twice")
					return err
				}, StateCancelled, "oncall", "asked twice"},
				{"expire", 50 * time.Millisecond, nil, StateExpired, DecidedBySystem, "no decision before the timeout"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					s := newTestService(t, k.dsn(t), Config{})
					ev, cancel := s.Subscribe()
					defer cancel()
					req := sampleRequest(`{"title":"bug"}`)
					req.Timeout = tc.timeout
					held := holdAsync(context.Background(), s, req)
					rec := nextCreated(t, ev)
					if rec.State != StatePending {
						t.Fatalf("new record state: got %q, want pending", rec.State)
					}
					if tc.decide != nil {
						if err := tc.decide(s, rec.ID); err != nil {
							t.Fatalf("decide: %v", err)
						}
					}
					got := waitHold(t, held)
					if got.err != nil {
						t.Fatalf("Hold: %v", got.err)
					}
					if got.res.ID != rec.ID || got.res.State != tc.state || got.res.DecidedBy != tc.by || got.res.Comment != tc.comment {
						t.Errorf("Hold: got %+v, want id %s state %s by %s comment %q", got.res, rec.ID, tc.state, tc.by, tc.comment)
					}
					if got.res.Approved() != (tc.state == StateApproved) {
						t.Errorf("Approved(): got %v for state %s", got.res.Approved(), tc.state)
					}
					stored, err := s.Get(context.Background(), rec.ID)
					if err != nil || stored.State != tc.state || stored.DecidedBy != tc.by {
						t.Errorf("stored record: got %q by %q (%v), want %q by %q", stored.State, stored.DecidedBy, err, tc.state, tc.by)
					}
				})
			}
		})
	}
}

func TestHoldRecord(t *testing.T) {
	s := newTestService(t, storeKinds()[0].dsn(t), Config{BodyPreview: 8})
	ev, cancel := s.Subscribe()
	defer cancel()
	body := `{"title":"héllo wörld"}`
	held := holdAsync(context.Background(), s, sampleRequest(body))
	rec := nextCreated(t, ev)
	for _, c := range []struct{ field, got, want string }{
		{"sandbox", rec.Sandbox, "sbx-7f3a"},
		{"labels.task", rec.Labels["task"], "release-triage"},
		{"url (in full: the sandbox chose it)", rec.URL, "https://api.github.com/repos/acme/app/issues?access_token=s3cr3t&state=open"},
		{"headers", fmt.Sprint(rec.Headers), "map[Content-Type:[application/json]]"},
		{"body_preview", rec.BodyPreview, `{"title"`},
		{"body_sha256", rec.BodySHA256, sha256Hex([]byte(body))},
		{"rule", rec.Rule, "github.write"},
		{"reason", rec.Reason, "writes to GitHub need a human"},
		{"credentials", fmt.Sprint(rec.Credentials), "[github-write]"},
		{"content_type", rec.ContentType, "application/json"},
	} {
		if c.got != c.want {
			t.Errorf("record %s: got %q, want %q", c.field, c.got, c.want)
		}
	}
	if rec.BodySize != int64(len(body)) || !rec.BodyTruncated {
		t.Errorf("record body_size/truncated: got %d/%v, want %d/true", rec.BodySize, rec.BodyTruncated, len(body))
	}
	if got := rec.Expires.Sub(rec.Created); got != DefaultTimeout {
		t.Errorf("expires - created: got %s, want the default %s", got, DefaultTimeout)
	}
	if _, err := s.Decide(context.Background(), rec.ID, StateDenied, "oncall", ""); err != nil {
		t.Fatal(err)
	}
	waitHold(t, held)
}

// TestHoldClientGone: when the caller's context ends, the record says the agent
// disconnected (not an approver's cancel or denial), nothing is reported as approved, even
// if an approval comes right after, and the body is not kept.
func TestHoldClientGone(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			s := newTestService(t, k.dsn(t), Config{})
			ev, cancelEv := s.Subscribe()
			defer cancelEv()
			ctx, cancel := context.WithCancel(context.Background())
			held := holdAsync(ctx, s, sampleRequest(`{}`))
			rec := nextCreated(t, ev)
			cancel()
			got := waitHold(t, held)
			if got.err != nil || got.res.State != StateDisconnected || got.res.Approved() || got.res.DecidedBy != DecidedBySystem {
				t.Fatalf("Hold after the client went away: got %+v, %v; want disconnected by airlock", got.res, got.err)
			}
			stored, _ := s.Get(context.Background(), rec.ID)
			if stored.State != StateDisconnected || stored.DecidedBy != DecidedBySystem || !strings.Contains(stored.Comment, "agent disconnected") {
				t.Errorf("stored record: got %q by %q (%q), want disconnected by airlock", stored.State, stored.DecidedBy, stored.Comment)
			}
			if _, err := s.Decide(context.Background(), rec.ID, StateApproved, "oncall", ""); !errors.Is(err, ErrDecided) {
				t.Errorf("approving a disconnected record: got %v, want ErrDecided", err)
			}
			if _, err := s.Store().Body(context.Background(), rec.ID); !errors.Is(err, ErrBodyGone) {
				t.Errorf("body of a disconnected record: got %v, want ErrBodyGone (not kept)", err)
			}
		})
	}
}

// TestHoldRetryWindow: an identical request approved moments ago passes once without a
// prompt; a changed body or a second retry asks again.
func TestHoldRetryWindow(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			s := newTestService(t, k.dsn(t), Config{})
			ev, cancel := s.Subscribe()
			defer cancel()
			ctx := context.Background()

			held := holdAsync(ctx, s, sampleRequest(`{"n":1}`))
			first := nextCreated(t, ev)
			if _, err := s.Decide(ctx, first.ID, StateApproved, "oncall", ""); err != nil {
				t.Fatal(err)
			}
			if got := waitHold(t, held); !got.res.Approved() {
				t.Fatalf("first Hold: got %+v, %v", got.res, got.err)
			}

			retry, err := s.Hold(ctx, sampleRequest(`{"n":1}`))
			if err != nil || !retry.Approved() || retry.ID == first.ID || retry.DecidedBy != "oncall" {
				t.Fatalf("retry within the window: got %+v, %v; want approved by oncall as a new record", retry, err)
			}
			if r, _ := s.Get(ctx, retry.ID); r.RetryOf != first.ID || r.State != StateApproved {
				t.Errorf("retry record: got retry_of %q state %q, want %s approved", r.RetryOf, r.State, first.ID)
			}
			if r, _ := s.Get(ctx, first.ID); r.ReusedBy != retry.ID {
				t.Errorf("grant record: got reused_by %q, want %s", r.ReusedBy, retry.ID)
			}
			nextCreated(t, ev) // the retry's own record

			for _, tc := range []struct{ name, body string }{
				{"tampered body", `{"n":2}`},
				{"second retry (grant used up)", `{"n":1}`},
			} {
				held := holdAsync(ctx, s, sampleRequest(tc.body))
				rec := nextCreated(t, ev)
				if rec.State != StatePending || rec.ID == first.ID {
					t.Errorf("%s: got record %s in state %q, want a new pending approval", tc.name, rec.ID, rec.State)
				}
				if _, err := s.Decide(ctx, rec.ID, StateDenied, "oncall", ""); err != nil {
					t.Fatal(err)
				}
				if got := waitHold(t, held); got.res.State != StateDenied {
					t.Errorf("%s: got %+v, want denied", tc.name, got.res)
				}
			}
		})
	}
}

// TestHoldRestart: a Service that stops while a request is held refuses that call cleanly;
// the record survives pending, a new Service on the same store can decide it, and the
// client's retry then passes through the grant.
func TestHoldRestart(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			dsn := k.dsn(t)
			ctx := context.Background()
			s1 := newTestService(t, dsn, Config{})
			ev, cancel := s1.Subscribe()
			defer cancel()
			held := holdAsync(ctx, s1, sampleRequest(`{"restart":true}`))
			rec := nextCreated(t, ev)
			if err := s1.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			got := waitHold(t, held)
			if !errors.Is(got.err, ErrClosed) || got.res.Approved() {
				t.Fatalf("Hold across shutdown: got %+v, %v; want ErrClosed", got.res, got.err)
			}
			if _, err := s1.Hold(ctx, sampleRequest(`{}`)); !errors.Is(err, ErrClosed) {
				t.Errorf("Hold after Close: got %v, want ErrClosed", err)
			}

			s2 := newTestService(t, dsn, Config{})
			survived, err := s2.Get(ctx, rec.ID)
			if err != nil || survived.State != StatePending {
				t.Fatalf("after restart: got %q, %v; want the record still pending", survived.State, err)
			}
			if _, err := s2.Decide(ctx, rec.ID, StateApproved, "oncall", "late but fine"); err != nil {
				t.Fatalf("deciding after restart: %v", err)
			}
			retry, err := s2.Hold(ctx, sampleRequest(`{"restart":true}`))
			if err != nil || !retry.Approved() {
				t.Errorf("client retry after restart: got %+v, %v; want approved through the grant", retry, err)
			}
		})
	}
}

// TestHoldRestartExpires: a record whose time ran out while no airlock ran is expired at start.
func TestHoldRestartExpires(t *testing.T) {
	dsn := storeKinds()[0].dsn(t)
	st := openTestStore(t, dsn)
	old := testRecord("apr-old", time.Now().Add(-time.Hour))
	if err := st.Create(context.Background(), old, nil); err != nil {
		t.Fatal(err)
	}
	s := newTestService(t, dsn, Config{})
	if r, _ := s.Get(context.Background(), "apr-old"); r.State != StateExpired {
		t.Errorf("stale pending record after start: got %q, want expired", r.State)
	}
}

// TestHoldSharedStore: two Services (replicas) on one store; a decision taken on one
// releases the request held by the other.
func TestHoldSharedStore(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			dsn := k.dsn(t)
			a := newTestService(t, dsn, Config{})
			b := newTestService(t, dsn, Config{})
			ev, cancel := a.Subscribe()
			defer cancel()
			held := holdAsync(context.Background(), a, sampleRequest(`{"replica":"a"}`))
			rec := nextCreated(t, ev)
			if _, err := b.Decide(context.Background(), rec.ID, StateApproved, "oncall", "via b"); err != nil {
				t.Fatalf("Decide on replica b: %v", err)
			}
			got := waitHold(t, held)
			if got.err != nil || !got.res.Approved() || got.res.Comment != "via b" {
				t.Errorf("Hold on replica a: got %+v, %v; want approved with b's comment", got.res, got.err)
			}
		})
	}
}

// TestHoldConcurrent: 100 held requests, half approved and half denied, end as decided and
// leave no goroutine behind once the Service is closed.
func TestHoldConcurrent(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			dsn := k.dsn(t)
			before := runtime.NumGoroutine()
			const n = 100
			s, err := New(context.Background(), Options{Config: Config{Store: dsn, NewBurst: n}, PollInterval: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			results := make([]Result, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := s.Hold(context.Background(), sampleRequest(fmt.Sprintf(`{"i":%d}`, i)))
					if err != nil {
						t.Errorf("Hold %d: %v", i, err)
					}
					results[i] = res
				}()
			}
			var pending []Record
			for deadline := time.Now().Add(60 * time.Second); len(pending) < n; {
				if time.Now().After(deadline) {
					t.Fatalf("pending approvals: got %d, want %d", len(pending), n)
				}
				time.Sleep(10 * time.Millisecond)
				if pending, err = s.List(context.Background(), ListFilter{State: StatePending}); err != nil {
					t.Fatal(err)
				}
			}
			want := map[string]State{}
			for i, rec := range pending {
				state := StateApproved
				if i%2 == 1 {
					state = StateDenied
				}
				want[rec.ID] = state
				if _, err := s.Decide(context.Background(), rec.ID, state, "oncall", ""); err != nil {
					t.Fatalf("Decide %s: %v", rec.ID, err)
				}
			}
			wg.Wait()
			for i, r := range results {
				if r.State != want[r.ID] {
					t.Errorf("request %d (%s): got %q, want %q", i, r.ID, r.State, want[r.ID])
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			after := runtime.NumGoroutine()
			for i := 0; i < 200 && after > before; i++ {
				time.Sleep(10 * time.Millisecond) // let exiting goroutines finish
				after = runtime.NumGoroutine()
			}
			if after > before {
				buf := make([]byte, 1<<16)
				t.Errorf("goroutines: got %d after, want at most %d as before\n%s", after, before, buf[:runtime.Stack(buf, true)])
			}
		})
	}
}

// TestHoldStoreDown: without a store there is no decision, and Hold says so (fail closed).
func TestHoldStoreDown(t *testing.T) {
	st := openTestStore(t, storeKinds()[0].dsn(t))
	s, err := New(context.Background(), Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	st.Close()
	res, err := s.Hold(context.Background(), sampleRequest(`{}`))
	if err == nil || res.Approved() {
		t.Errorf("Hold with the store down: got %+v, %v; want an error", res, err)
	}
}
