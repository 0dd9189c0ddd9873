package approval

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestEndedRecordsKeepOnlyTheShape: every way a record ends (approved, denied, cancelled,
// expired, disconnected, and a retry created already approved) drops the header values, the
// body preview and the body, and keeps what says what was asked and decided: method, URL,
// header names, body size and hash, request hash, rule, decision.
func TestEndedRecordsKeepOnlyTheShape(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			st := openTestStore(t, k.dsn(t))
			t0 := time.Unix(1_800_000_000, 0).UTC()
			check := func(id string, want State) {
				t.Helper()
				r, err := st.Get(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if r.State != want {
					t.Errorf("%s: state %q, want %q", id, r.State, want)
				}
				if r.BodyPreview != "" {
					t.Errorf("%s (%s): body preview %q kept", id, want, r.BodyPreview)
				}
				for name, vs := range r.Headers {
					if len(vs) != 0 {
						t.Errorf("%s (%s): header %s keeps values %q", id, want, name, vs)
					}
				}
				if _, ok := r.Headers["Cookie"]; !ok || len(r.Headers) != 2 {
					t.Errorf("%s (%s): header names %v, want Content-Type and Cookie", id, want, r.Headers)
				}
				if r.BodySize != 7 || r.BodySHA256 != "b0d" || r.RequestSHA256 != "req-"+id || r.URL == "" || r.Method != "POST" || r.Rule != "r" {
					t.Errorf("%s (%s): lost the request's shape: %+v", id, want, r)
				}
				if _, err := st.Body(ctx, id); !errors.Is(err, ErrBodyGone) {
					t.Errorf("%s (%s): Body: got %v, want ErrBodyGone", id, want, err)
				}
			}
			for _, s := range []State{StateApproved, StateDenied, StateCancelled, StateDisconnected} {
				id := "apr-" + string(s)
				if err := st.Create(ctx, testRecord(id, t0), []byte("{\"a\":1}")); err != nil {
					t.Fatal(err)
				}
				if _, err := st.Decide(ctx, id, Decision{State: s, By: "oncall", At: t0}); err != nil {
					t.Fatal(err)
				}
				check(id, s)
			}
			if err := st.Create(ctx, testRecord("apr-exp", t0), []byte("{\"a\":1}")); err != nil {
				t.Fatal(err)
			}
			if n, err := st.ExpireDue(ctx, t0.Add(time.Hour)); err != nil || n != 1 {
				t.Fatalf("ExpireDue: %d, %v", n, err)
			}
			check("apr-exp", StateExpired)
			retry := testRecord("apr-retry", t0)
			retry.State, retry.DecidedBy, retry.DecidedAt, retry.RetryOf = StateApproved, "oncall", t0, "apr-approved"
			if err := st.Create(ctx, retry, []byte("{\"a\":1}")); err != nil {
				t.Fatal(err)
			}
			check("apr-retry", StateApproved)
		})
	}
}

// TestPruneKeepsPendingAndRecent: Prune deletes ended records decided before the cut and
// nothing else; the Service prunes at start with approvals.retention.
func TestPruneKeepsPendingAndRecent(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			ctx := context.Background()
			dsn := k.dsn(t)
			st := openTestStore(t, dsn)
			now := time.Now().UTC()
			old, recent := now.Add(-48*time.Hour), now.Add(-time.Hour)
			mk := func(id string, created time.Time, end State, at time.Time) {
				r := testRecord(id, created)
				r.Expires = now.Add(time.Hour) // not due
				if err := st.Create(ctx, r, nil); err != nil {
					t.Fatal(err)
				}
				if end != StatePending {
					if _, err := st.Decide(ctx, id, Decision{State: end, By: "x", At: at}); err != nil {
						t.Fatal(err)
					}
				}
			}
			mk("apr-old-denied", old, StateDenied, old)
			mk("apr-old-approved", old, StateApproved, old.Add(time.Minute))
			mk("apr-old-pending", old, StatePending, time.Time{})
			mk("apr-recent", recent, StateDenied, recent)
			s := newTestService(t, dsn, Config{Retention: Duration(24 * time.Hour)})
			_ = s
			for id, kept := range map[string]bool{"apr-old-denied": false, "apr-old-approved": false, "apr-old-pending": true, "apr-recent": true} {
				_, err := st.Get(ctx, id)
				if kept && err != nil || !kept && !errors.Is(err, ErrNotFound) {
					t.Errorf("%s after pruning at 24h: err %v, want kept %v", id, err, kept)
				}
			}
			if n, err := st.Prune(ctx, now); err != nil || n != 1 {
				t.Errorf("Prune(now): %d, %v; want 1 (apr-recent)", n, err)
			}
		})
	}
}

// TestHoldBounds: a held request whose headers pass approvals.max_header_bytes gets a 431
// LimitError, and past approvals.new_per_sandbox_burst a sandbox's new approvals get 429
// with Retry-After, other sandboxes unaffected, until the interval gives it another; neither
// makes a record.
func TestHoldBounds(t *testing.T) {
	clock := &testClock{now: time.Now()}
	s := newTestService(t, storeKinds()[0].dsn(t), Config{MaxHeaderBytes: 1024, NewBurst: 3, NewInterval: Duration(time.Minute)},
		func(o *Options) { o.Now = clock.Now })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	count := func() int {
		recs, err := s.List(ctx, ListFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return len(recs)
	}
	for _, h := range []http.Header{
		{"X-Big": {strings.Repeat("a", 1100)}},
		{strings.Repeat("N", 1100): {"v"}},
		func() http.Header {
			h := http.Header{}
			for i := range 200 {
				h.Add(fmt.Sprintf("X-%d", i), "v")
			}
			return h
		}(),
		{"X-Many": strings.Split(strings.Repeat("v,", 300), ",")},
	} {
		r := sampleRequest("")
		r.Header = h
		_, err := s.Hold(ctx, r)
		var le *LimitError
		if !errors.As(err, &le) || le.Status != http.StatusRequestHeaderFieldsTooLarge || !strings.Contains(le.Reason, "approvals.max_header_bytes") {
			t.Errorf("oversized headers: got %v, want a 431 LimitError naming approvals.max_header_bytes", err)
		}
	}
	if n := count(); n != 0 {
		t.Fatalf("records after refused holds: %d, want 0", n)
	}
	hold := func(sandbox string, i int) error {
		r := sampleRequest(fmt.Sprintf(`{"i":%d}`, i))
		r.SandboxID = sandbox
		hctx, stop := context.WithCancel(ctx)
		ch := holdAsync(hctx, s, r)
		select {
		case res := <-ch:
			stop()
			return res.err
		case <-time.After(200 * time.Millisecond):
			stop() // held: the agent goes away
			return waitHold(t, ch).err
		}
	}
	for i := range 3 {
		if err := hold("sbx-a", i); err != nil {
			t.Fatalf("hold %d within the burst: %v", i, err)
		}
	}
	err := hold("sbx-a", 3)
	var le *LimitError
	if !errors.As(err, &le) || le.Status != http.StatusTooManyRequests || le.RetryAfter <= 0 || !strings.Contains(le.Reason, "new_per_sandbox") {
		t.Fatalf("hold past the burst: got %v, want a 429 LimitError with Retry-After", err)
	}
	if err := hold("sbx-b", 0); err != nil {
		t.Errorf("another sandbox: %v", err)
	}
	clock.Add(time.Minute)
	if err := hold("sbx-a", 4); err != nil {
		t.Errorf("after the interval: %v", err)
	}
	if n := count(); n != 5 {
		t.Errorf("records: %d, want 5 (3 + other sandbox + 1 after the interval)", n)
	}
}
