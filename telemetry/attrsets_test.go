package telemetry

import (
	"context"
	"fmt"
	"testing"
)

// TestAttrSetsPastTheirBound: label combinations beyond the kept ones are counted under
// their own labels all the same, and the kept ones stay bounded.
func TestAttrSetsPastTheirBound(t *testing.T) {
	defer func(n int64) { maxAttrSets = n }(maxAttrSets)
	maxAttrSets = 3
	m, rd := manualMetrics(t)
	ctx := context.Background()
	n := int(maxAttrSets) + 5
	for i := range n {
		m.RequestDone(ctx, RequestFacts{Decision: "allow", Rule: fmt.Sprintf("r%d", i), Phase: "request"})
	}
	m.RequestDone(ctx, RequestFacts{Decision: "allow", Rule: fmt.Sprintf("r%d", n-1), Phase: "request"})
	got := points(t, rd)
	for _, i := range []int{0, int(maxAttrSets) - 1, n - 2} {
		if k := fmt.Sprintf("airlock.requests{decision=allow,phase=request,rule=r%d}", i); got[k] != 1 {
			t.Errorf("%s: got %v, want 1", k, got[k])
		}
	}
	if k := fmt.Sprintf("airlock.requests{decision=allow,phase=request,rule=r%d}", n-1); got[k] != 2 {
		t.Errorf("%s: got %v, want 2", k, got[k])
	}
	if kept := m.sets.n.Load(); kept > maxAttrSets {
		t.Errorf("kept %d attribute sets, bound %d", kept, maxAttrSets)
	}
}
