package rego

import (
	"context"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
)

// testTimeout bounds each policy test, as `opa test` does by default.
const testTimeout = 5 * time.Second

// RunTests runs the Rego tests (test_* rules) of a policy directory with OPA's tester, as
// `opa test DIR` does, and writes OPA's report to w (nil: no report). dir "" tests the
// shipped policy. err is set when the policy cannot be loaded or compiled, not for failing
// tests: those are counted in failed (errors included).
func RunTests(ctx context.Context, dir string, w io.Writer, verbose bool) (passed, failed int, err error) {
	var src *policySource
	if dir == "" {
		src, err = loadDir(ShippedPolicy(), ".", "shipped policy")
	} else {
		src, err = loadDir(nil, dir, dir)
	}
	if err != nil {
		return 0, 0, err
	}
	passedN, failures, err := runSourceTests(ctx, src, w, verbose)
	return passedN, len(failures), err
}

// runSourceTests runs the tests of src and returns how many passed and a line for each test
// that failed or errored.
func runSourceTests(ctx context.Context, src *policySource, w io.Writer, verbose bool) (int, []string, error) {
	store := inmem.NewFromObject(src.data)
	txn, err := store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return 0, nil, fmt.Errorf("open test store: %w", err)
	}
	defer store.Abort(ctx, txn)

	compiler := ast.NewCompiler().
		WithEnablePrintStatements(true).
		WithPathConflictsCheck(storage.NonEmpty(ctx, store, txn))
	ch, err := tester.NewRunner().
		SetCompiler(compiler).
		SetStore(store).
		SetModules(src.modules).
		CapturePrintOutput(true).
		EnableTracing(verbose).
		SetTimeout(testTimeout).
		RunTests(ctx, txn)
	if err != nil {
		return 0, nil, fmt.Errorf("compile tests of %s: %w", src.source, err)
	}
	var results []*tester.Result
	for r := range ch {
		results = append(results, r)
	}
	if err := ctx.Err(); err != nil {
		// The runner stops without a result for the tests it did not run: none of them
		// counts as failed, so a policy tested under an ended context is not known to pass
		// (red team: a reload at shutdown, or a run stopped while its policy loaded, took a
		// policy whose own test failed).
		return 0, nil, fmt.Errorf("test policy %s: stopped before every test ran: %w", src.source, err)
	}
	// Results arrive in any order; report them by file and line.
	sort.SliceStable(results, func(i, j int) bool {
		a, b := results[i].Location, results[j].Location
		if a == nil || b == nil {
			return a != nil
		}
		if a.File != b.File {
			return a.File < b.File
		}
		return a.Row < b.Row
	})
	passed := 0
	var failures []string
	for _, r := range results {
		switch {
		case r.Skip:
		case r.Pass():
			passed++
		default:
			failures = append(failures, describeFailure(r))
		}
	}
	if w != nil {
		rep := make(chan *tester.Result, len(results))
		for _, r := range results {
			rep <- r
		}
		close(rep)
		if err := (tester.PrettyReporter{Output: w, Verbose: verbose, FailureLine: true}).Report(rep); err != nil {
			return passed, failures, fmt.Errorf("report tests: %w", err)
		}
	}
	return passed, failures, nil
}

func describeFailure(r *tester.Result) string {
	where := ""
	if r.Location != nil {
		where = fmt.Sprintf("%s:%d: ", r.Location.File, r.Location.Row)
	}
	if r.Error != nil {
		return fmt.Sprintf("%s%s.%s: ERROR %v", where, r.Package, r.Name, r.Error)
	}
	return fmt.Sprintf("%s%s.%s: FAIL", where, r.Package, r.Name)
}
