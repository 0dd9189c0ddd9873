package rego

import (
	"context"
	"strings"
	"sync"
	"testing"
)

// Start returns before the policy is loaded; whatever is asked of the engine meanwhile
// waits for it and gets the loaded policy's answer.
func TestStartAnswersOnceLoaded(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": allowPolicy})
	e := Start(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout})
	var wg sync.WaitGroup
	rules := make([]string, 8)
	for i := range rules {
		wg.Go(func() {
			d, err := e.Decide(context.Background(), requestInput("GET", "a.example", "/"))
			if err != nil {
				t.Errorf("Decide while loading: %v", err)
			}
			rules[i] = d.Rule
		})
	}
	wg.Wait()
	for i, r := range rules {
		if r != "t.allow" {
			t.Errorf("decision %d by %q, want t.allow", i, r)
		}
	}
	if err := e.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, err := New(context.Background(), Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if e.Revision() != n.Revision() || e.Status().Revision != n.Revision() {
		t.Errorf("revision %q (status %+v), want New's %q", e.Revision(), e.Status(), n.Revision())
	}
}

// A policy that does not load under Start decides nothing: Wait returns New's error,
// every decision fails (the proxy refuses), and nothing reads as a policy in force.
func TestStartOfABrokenPolicyFailsClosed(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": "package airlock\n\ndecision := {\"action\": }\n"})
	_, newErr := New(context.Background(), Options{Dir: dir})
	e := Start(context.Background(), Options{Dir: dir})
	err := e.Wait(context.Background())
	if err == nil || newErr == nil || err.Error() != newErr.Error() || !strings.Contains(err.Error(), "p.rego:3") {
		t.Fatalf("Wait: %v; want New's error %v", err, newErr)
	}
	if d, err := e.Decide(context.Background(), requestInput("GET", "a.example", "/")); err == nil || d.Action != "" {
		t.Errorf("Decide = %+v, %v; want an error and no decision", d, err)
	}
	if _, _, err := e.Eval(context.Background(), requestInput("GET", "a.example", "/"), true); err == nil {
		t.Error("Eval: no error")
	}
	if e.Revision() != "" || e.BodyAware("a.example", "/") {
		t.Errorf("revision %q, body-aware %v; want none", e.Revision(), e.BodyAware("a.example", "/"))
	}
	if st := e.Status(); st.Revision != "" || st.Source != dir || !strings.Contains(st.LastError, "p.rego:3") {
		t.Errorf("status %+v", st)
	}
	if err := e.Reload(context.Background()); err == nil {
		t.Error("Reload of an engine that never loaded: no error")
	}
	// Options New refuses, Start's engine refuses too.
	if err := Start(context.Background(), Options{Dir: dir, Bundle: "x.tar.gz"}).Wait(context.Background()); err == nil {
		t.Error("Start with a directory and a bundle: no error")
	}
}

// A caller that stops waiting gets its context's error, not a decision.
func TestStartWaitHonoursTheContext(t *testing.T) {
	e := &Engine{loaded: make(chan struct{})} // a load that never ends
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.Decide(ctx, requestInput("GET", "a.example", "/")); err == nil {
		t.Error("Decide with a cancelled context on an engine still loading: no error")
	}
	if err := e.Wait(ctx); err == nil || !strings.Contains(err.Error(), "canceled") {
		t.Errorf("Wait: %v", err)
	}
}
