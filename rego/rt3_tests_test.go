package rego

import (
	"context"
	"testing"
)

// Red team (round 3): load runs a policy's own tests only when a file is named *_test.rego
// (hasTests), but OPA's tester, like `opa test DIR`, runs every test_ rule of every module.
// A policy whose only tests live in, say, checks.rego (or whose *_test.rego files were
// removed) loads with a failing test: `airlock policy test` / `opa test` report the failure,
// the proxy serves the policy anyway.
//
// Review: OPA's runner also runs a rule with a dotted name one of whose parts starts with
// test_ (suite.test_x runs, and todo_test_ ones are reported as skipped); the first
// fix looked only at the name's first part.
func TestRT3TestsOutsideTestFilesRun(t *testing.T) {
	const failing = `data.airlock.decision.action == "deny" with input as {"version": 1, "phase": "connect", "request": {"host": "evil.example", "port": 443}}`
	for name, checks := range map[string]string{
		"test rule":        "package checks\n\ntest_evil_is_denied if { " + failing + " }\n",
		"dotted test rule": "package checks\n\nsuite.test_evil_is_denied if { " + failing + " }\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeShippedRulesOnly(t, dir)
			writeShippedData(t, dir)
			writeFiles(t, dir, map[string]string{"zz_open.rego": openEvilRule, "checks.rego": checks})
			_, failed, err := RunTests(context.Background(), dir, nil, false)
			if err != nil || failed == 0 {
				t.Fatalf("baseline: RunTests (as `airlock policy test`) found %d failures (%v), want 1", failed, err)
			}
			e, err := New(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout})
			if err == nil {
				d, derr := e.Decide(context.Background(), requestInput("GET", "evil.example", "/"))
				t.Errorf("a policy whose test (in checks.rego) fails loaded; GET evil.example → %s by %q (%v)", d.Action, d.Rule, derr)
			}
		})
	}
}

// Red team (review): a rule that only looks like data, limits["test_env"], is a test to OPA's
// runner (a part of its name starts with test_), and fails when undefined: `airlock policy
// test` reports it, so the policy does not load either; the two never disagree.
func TestRT4KeyNamedLikeATestIsATest(t *testing.T) {
	dir := t.TempDir()
	writeShippedRulesOnly(t, dir)
	writeShippedData(t, dir)
	writeFiles(t, dir, map[string]string{"env.rego": "package extra\n\nlimits[\"test_env\"] := 5 if input.request.host == \"staging.example\"\n"})
	_, failed, err := RunTests(context.Background(), dir, nil, false)
	if err != nil || failed != 1 {
		t.Fatalf("RunTests: %d failures (%v), want 1", failed, err)
	}
	if _, err := New(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout}); err == nil {
		t.Error("a policy whose test (as `airlock policy test` counts it) fails loaded")
	}
}
