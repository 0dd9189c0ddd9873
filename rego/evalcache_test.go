package rego

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// The evaluator reads base documents through the snapshot's dataCache: what a rule reads
// must be what the data holds, at every depth, and `with` must still replace it.
func TestDataReadsMatchTheData(t *testing.T) {
	e := newTestEngine(t, map[string]string{
		"data.json": `{"extra": {"limits": {"a.example": 3}, "names": ["x", "y"]}, "flag": true}`,
		"p.rego": `package airlock

default seen := {}

_limit := data.extra.limits[input.request.host]

_replaced := r if {
	r := _limit with data.extra.limits as {"a.example": 9}
}

seen := {
	"limit": data.extra.limits[input.request.host],
	"names": count(data.extra.names),
	"second": data.extra.names[1],
	"flag": data.flag,
	"root": count(data.extra),
	"replaced": _replaced,
	"after": _limit,
	"missing": object.get(data.extra.limits, "b.example", "none"),
}

decision := {"action": "allow", "rule": "r", "reason": json.marshal(seen)}
`,
	}, Options{NoDecisionCache: true})
	for range 3 { // the same answers on every evaluation: nothing is kept from one to the next
		d, err := e.Decide(context.Background(), requestInput("GET", "a.example", "/"))
		if err != nil {
			t.Fatal(err)
		}
		want := `{"after":3,"flag":true,"limit":3,"missing":"none","names":2,"replaced":9,"root":2,"second":"y"}`
		if d.Reason != want {
			t.Fatalf("reason %s, want %s", d.Reason, want)
		}
	}
	// A host the data does not hold leaves the rule undefined, as without the cache.
	d, err := e.Decide(context.Background(), requestInput("GET", "b.example", "/"))
	if err != nil || d.Reason != `{}` {
		t.Errorf("unlisted host: %+v, %v; want reason {}", d, err)
	}
}

// A caller's context that ends while the policy runs stops the evaluation (the request it
// was for has gone), well before the evaluation's own timeout.
func TestDecideCancelledWhileEvaluating(t *testing.T) {
	e := newTestEngine(t, map[string]string{"p.rego": `package airlock

decision := {"action": "allow"} if {
	count([1 | some a in numbers.range(1, 2000); some b in numbers.range(1, 2000); some c in numbers.range(1, 2000); a + b + c < 0]) == 0
}
`}, Options{Timeout: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	d, err := e.Decide(ctx, requestInput("GET", "a.example", "/"))
	if !errors.Is(err, context.Canceled) || !d.Denies() {
		t.Errorf("got %+v, %v; want a deny and context.Canceled", d, err)
	}
}

// One builtin that loops for long (numbers.range over 10^9) is stopped by the timeout too:
// OPA asks the Cancel inside the loop.
func TestDecideTimeoutInsideABuiltin(t *testing.T) {
	e := newTestEngine(t, map[string]string{"p.rego": `package airlock

decision := {"action": "allow"} if {
	count(numbers.range(1, 1000000000)) == 0
}
`}, Options{Timeout: 20 * time.Millisecond})
	d, err := e.Decide(context.Background(), requestInput("GET", "a.example", "/"))
	if !errors.Is(err, ErrTimeout) || !d.Denies() {
		t.Errorf("got %+v, %v; want a deny and ErrTimeout", d, err)
	}
}

// Red team: an evaluation must stop at the first expression after its deadline or its
// context's end. A check every 64th expression let an agent whose input made each
// expression slow (split of a 1 MiB path) run 12x past the timeout.
func TestEvalCancelAnswersAtOnce(t *testing.T) {
	c := startEvalCancel(context.Background(), time.Millisecond)
	for !c.timedOut.Load() {
		time.Sleep(time.Millisecond)
	}
	if !c.Cancelled() {
		t.Error("Cancelled after the timer fired = false, want true on the first call")
	}
	c.stop()

	ctx, cancel := context.WithCancel(context.Background())
	c = startEvalCancel(ctx, time.Hour)
	if c.Cancelled() {
		t.Fatal("Cancelled before anything ended = true")
	}
	cancel()
	if !c.Cancelled() {
		t.Error("Cancelled after the context ended = false, want true on the first call")
	}
	c.stop()

	// A reused evalCancel starts clean: no flag, no deadline of the evaluation before.
	c = startEvalCancel(context.Background(), time.Hour)
	if c.Cancelled() || c.timedOut.Load() {
		t.Error("a fresh evaluation's Cancelled = true")
	}
	c.stop()
}

// The shipped policy reads one query parameter, service (git push discovery): the others
// are not in its input, so a request that differs only in them is the same decision,
// while service itself still decides, beside other parameters and with the decision
// cache on.
func TestQueryParametersTheShippedPolicyReads(t *testing.T) {
	e, err := New(context.Background(), Options{Timeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	snap := e.cur.Load()
	if want := []string{"service"}; !slices.Equal(snap.use.queryKeys, want) {
		t.Fatalf("query parameters read: %q, want %q", snap.use.queryKeys, want)
	}
	withQuery := func(q map[string][]string) *Input {
		in := requestInput("GET", "github.com", "/acme/app.git/info/refs")
		in.Request.Query = q
		return in
	}
	for _, tc := range []struct {
		q    map[string][]string
		rule string
	}{
		{map[string][]string{"service": {"git-upload-pack"}, "page": {"1"}}, "github.read"},
		{map[string][]string{"service": {"git-receive-pack"}, "page": {"1"}}, "github.write"},
		{map[string][]string{"page": {"2"}, "service": {"git-receive-pack"}}, "github.write"},
		{map[string][]string{"service": {"git-upload-pack", "git-receive-pack"}}, "github.write"},
		{map[string][]string{"page": {"2"}}, "github.read"},
		{map[string][]string{"Service": {"git-receive-pack"}}, "github.read"},
		{map[string][]string{"service": {"git-upload-pack"}, "page": {"3"}}, "github.read"},
	} {
		for range 2 { // evaluated, then from the cache
			d, err := e.Decide(context.Background(), withQuery(tc.q))
			if err != nil || d.Rule != tc.rule {
				t.Errorf("query %v: %s by %q, %v; want %q", tc.q, d.Action, d.Rule, err, tc.rule)
			}
		}
	}
	// Unread parameters share one cache entry; service does not.
	k1 := snap.cache.key(withQuery(map[string][]string{"page": {"1"}}))
	k2 := snap.cache.key(withQuery(map[string][]string{"page": {"2"}, "q": {"x"}}))
	k3 := snap.cache.key(withQuery(map[string][]string{"page": {"2"}, "service": {"x"}}))
	if k1 != k2 || k1 == k3 {
		t.Errorf("cache keys: unread parameters equal %v (want true), service differs %v (want true)", k1 == k2, k1 != k3)
	}
}
