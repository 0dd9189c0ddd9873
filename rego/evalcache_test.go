package rego

import (
	"context"
	"errors"
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
