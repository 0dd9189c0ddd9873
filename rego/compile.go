package rego

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// DecisionQuery is the document the proxy asks for (docs/architecture.md, "The policy contract").
const DecisionQuery = "data.airlock.decision"

var decisionRef = ast.MustParseRef(DecisionQuery)

// snapshot is one compiled, tested policy ready for evaluation. It is immutable once built and
// shared by all concurrent evaluations until a reload swaps in the next one.
type snapshot struct {
	compiler *ast.Compiler
	qc       ast.QueryCompiler
	query    ast.Body // resultVar = data.airlock.decision, compiled once
	store    storage.Store
	txn      storage.Transaction // a read transaction held for the snapshot's life: the store is never written
	data     *dataCache          // the store's base documents, read once
	use      inputUse            // which optional input parts the policy reads
	sbx      sandboxTerms        // the sandbox part of the last input, reused by the next
	cache    *decisionCache      // nil when the policy is not cacheable
	// bodyAware is data.body_aware: the destinations whose JSON bodies the policy reads.
	bodyAware bodyAware
	revision  string
	source    string
	loadedAt  time.Time
}

// compileSource compiles the policy (without its tests) against its data and prepares the
// decision query. Errors name the file and line at fault.
func compileSource(ctx context.Context, src *policySource) (*snapshot, error) {
	ba, err := bodyAwareOf(src.data)
	if err != nil {
		return nil, fmt.Errorf("compile policy %s: %w", src.source, err)
	}
	if err := checkHostLists(src.data); err != nil {
		return nil, fmt.Errorf("compile policy %s: %w", src.source, err)
	}
	store := inmem.NewFromObjectWithOpts(src.data,
		inmem.OptRoundTripOnWrite(true), inmem.OptReturnASTValuesOnRead(true))
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		return nil, fmt.Errorf("compile policy %s: open store: %w", src.source, err)
	}
	c := ast.NewCompiler().
		WithEnablePrintStatements(false).
		WithPathConflictsCheck(storage.NonEmpty(ctx, store, txn))
	if c.Compile(src.policyModules()); c.Failed() {
		store.Abort(ctx, txn)
		return nil, fmt.Errorf("compile policy %s: %w", src.source, c.Errors)
	}
	if err := checkHostRules(c); err != nil {
		store.Abort(ctx, txn)
		return nil, fmt.Errorf("compile policy %s: %w", src.source, err)
	}
	if len(c.GetRulesForVirtualDocument(decisionRef)) == 0 {
		store.Abort(ctx, txn)
		return nil, fmt.Errorf("compile policy %s: no rule defines %s (package airlock, rule decision)", src.source, DecisionQuery)
	}
	dc, err := newDataCache(ctx, store, txn)
	if err != nil {
		store.Abort(ctx, txn)
		return nil, fmt.Errorf("compile policy %s: read data: %w", src.source, err)
	}
	qc := c.QueryCompiler()
	query, err := qc.Compile(ast.NewBody(ast.Equality.Expr(ast.NewTerm(resultVar), ast.NewTerm(decisionRef))))
	if err != nil {
		store.Abort(ctx, txn)
		return nil, fmt.Errorf("prepare %s in policy %s: %w", DecisionQuery, src.source, err)
	}
	return &snapshot{
		compiler:  c,
		qc:        qc,
		query:     query,
		store:     store,
		txn:       txn,
		data:      dc,
		use:       inputUseOf(c),
		cache:     newDecisionCache(c, inputUseOf(c)),
		bodyAware: ba,
		revision:  src.revision,
		source:    src.source,
		loadedAt:  time.Now(),
	}, nil
}

// resultVar is bound to the decision in the prepared query.
var resultVar = ast.Var("airlock_decision")

// load compiles a source and, when it holds *_test.rego files, runs them: a policy whose own
// tests fail is not used.
func load(ctx context.Context, src *policySource) (*snapshot, error) {
	snap, err := compileSource(ctx, src)
	if err != nil {
		return nil, err
	}
	if !src.hasTests() {
		return snap, nil
	}
	_, failed, err := runSourceTests(ctx, src, nil, false)
	if err != nil {
		return nil, fmt.Errorf("test policy %s: %w", src.source, err)
	}
	if len(failed) > 0 {
		return nil, fmt.Errorf("test policy %s: %w", src.source, &TestFailure{Failed: failed})
	}
	return snap, nil
}

// TestFailure reports the policy tests that failed or errored when a policy was loaded.
type TestFailure struct {
	Failed []string // "file:line: package.test_name: FAIL|ERROR ..."
}

func (e *TestFailure) Error() string {
	if len(e.Failed) == 1 {
		return "1 policy test failed: " + e.Failed[0]
	}
	return fmt.Sprintf("%d policy tests failed: %s (and more)", len(e.Failed), e.Failed[0])
}

// IsTestFailure reports whether err says that a policy's own tests failed.
func IsTestFailure(err error) bool {
	var tf *TestFailure
	return errors.As(err, &tf)
}
