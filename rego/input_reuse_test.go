package rego

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// TestInputReusesSandboxOnlyWhenSame holds the reuse of the sandbox object to what it
// promises: the document is the one inputValue builds, whatever sandbox came before, and a
// change to the caller's labels map after the call does not leak into the reused object.
func TestInputReusesSandboxOnlyWhenSame(t *testing.T) {
	var sbx sandboxTerms
	use := inputUse{query: true, headers: true}
	mk := func(id string, labels map[string]string) *Input {
		in := benchInput("GET", "example.com", "/x")
		in.Sandbox = SandboxInput{ID: id, Labels: labels}
		return in
	}
	labels := map[string]string{"tenant": "acme"}
	steps := []*Input{
		mk("a", labels),
		mk("a", labels), // reused
		mk("a", map[string]string{"tenant": "other"}),
		mk("b", map[string]string{"tenant": "other"}),
		mk("b", nil),
		mk("b", map[string]string{}),
		mk("a", labels),
	}
	for i, in := range steps {
		got := inputValueReusing(in, use, &sbx)
		if want := inputValue(in, use); got.Compare(want) != 0 {
			t.Fatalf("step %d: reusing gave\n%v\nwant\n%v", i, got, want)
		}
	}
	first := inputValueReusing(mk("a", labels), use, &sbx)
	labels["tenant"] = "changed"
	again := inputValueReusing(mk("a", labels), use, &sbx)
	tenant := ast.Ref{ast.StringTerm("sandbox"), ast.StringTerm("labels"), ast.StringTerm("tenant")}
	v1, _ := first.(ast.Object).Find(tenant)
	v2, _ := again.(ast.Object).Find(tenant)
	if v1.Compare(ast.String("acme")) != 0 || v2.Compare(ast.String("changed")) != 0 {
		t.Fatalf("labels after a change: first %v, again %v; want acme, changed", v1, v2)
	}
}

// TestDecideConcurrentSandboxes: evaluations from different sandboxes at once each see
// their own sandbox (the reused object is never another sandbox's; run with -race).
func TestDecideConcurrentSandboxes(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": `package airlock

decision := {"action": "allow", "rule": input.sandbox.id, "reason": input.sandbox.labels.tenant}
`})
	e, err := New(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout, NoDecisionCache: true})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				id := fmt.Sprintf("sbx-%d", (g+i)%3)
				in := requestInput("GET", "a.example", "/")
				in.Sandbox = SandboxInput{ID: id, Labels: map[string]string{"tenant": "t-" + id}}
				d, err := e.Decide(context.Background(), in)
				if err != nil || d.Rule != id || d.Reason != "t-"+id {
					errs <- fmt.Errorf("sandbox %s decided as %q/%q, %v", id, d.Rule, d.Reason, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
