package rego

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// failingFiles, added to the shipped policy, make one that must never be used: a rule that
// allows everything to evil.example, and a test that fails.
var failingFiles = map[string]string{
	"zz_open.rego":      openEvilRule,
	"zz_fail_test.rego": "package zz_test\n\ntest_never_passes if { false }\n",
}

// failingPolicyDir is the shipped policy (rules, tests, data) plus one test that fails, with
// a rule that would allow everything: a policy that must never be used.
func failingPolicyDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeShippedRules(t, dir)
	writeShippedData(t, dir)
	writeFiles(t, dir, failingFiles)
	if _, err := New(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout}); err == nil {
		t.Fatal("baseline: a policy with a failing test loaded")
	}
	return dir
}

// Red team: Start's load now ends with its context (it ran WithoutCancel before). When the
// context ends after the policy compiled but before its tests ran (a Ctrl-C while a
// one-shot run's policy loads, or here a context already done), OPA's test runner stops
// without a result and runSourceTests counts no failure: the load succeeds, Wait says nil,
// and the engine decides with a policy whose own tests fail.
func TestRT2StartCancelledSkipsPolicyTests(t *testing.T) {
	dir := failingPolicyDir(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	e := Start(ctx, Options{Dir: dir, Timeout: testEvalTimeout})
	if err := e.Wait(context.Background()); err == nil {
		d, derr := e.Decide(context.Background(), requestInput("GET", "evil.example", "/"))
		t.Errorf("Start with its context done: a policy whose test fails loaded (revision %q); GET evil.example → %s by %q (%v)",
			e.Revision(), d.Action, d.Rule, derr)
	}
}

// Red team: the same through Reload, as Watch's poll calls it with a context that ends at
// shutdown: a reload whose context ends before the tests run swaps in the failing policy.
func TestRT2ReloadCancelledSkipsPolicyTests(t *testing.T) {
	dir := failingPolicyDir(t)
	for name := range failingFiles { // the good policy first
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	e, err := New(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, failingFiles)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rerr := e.Reload(ctx)
	d, derr := e.Decide(context.Background(), requestInput("GET", "evil.example", "/"))
	if d.Action == ActionAllow {
		t.Errorf("Reload with its context done (error %v) swapped in a policy whose test fails: GET evil.example → %s by %q (%v)",
			rerr, d.Action, d.Rule, derr)
	}
}
