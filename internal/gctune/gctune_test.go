package gctune

import (
	"runtime"
	"sync/atomic"
	"testing"
)

func TestPercentFor(t *testing.T) {
	for _, tc := range []struct {
		live, budget uint64
		want         int
	}{
		{0, 48 << 20, maxPercent},
		{10 << 20, 48 << 20, maxPercent}, // may grow to 30 MiB: within the budget
		{16 << 20, 48 << 20, maxPercent}, // to 48 MiB exactly
		{20 << 20, 48 << 20, 140},        // to 48 MiB
		{24 << 20, 48 << 20, minPercent}, // half the budget: the default
		{200 << 20, 48 << 20, minPercent},
	} {
		if got := percentFor(tc.live, tc.budget); got != tc.want {
			t.Errorf("percentFor(%d MiB, %d MiB) = %d, want %d", tc.live>>20, tc.budget>>20, got, tc.want)
		}
	}
}

var keep [][]byte

// After each collection the target follows the live heap: raised while it is small,
// back to the default once it holds more than half the budget.
func TestTargetFollowsTheLiveHeap(t *testing.T) {
	var set atomic.Int64
	tu := start(64<<20, func(p int) int { return int(set.Swap(int64(p))) })
	waitFor := func(want int) {
		t.Helper()
		for range 50 {
			runtime.GC()
			runtime.Gosched()
			if tu.current() == want {
				return
			}
		}
		t.Fatalf("target %d, want %d (live heap %d MiB)", tu.current(), want, liveMiB())
	}
	waitFor(maxPercent) // this test binary's heap is small
	for range 48 {
		keep = append(keep, make([]byte, 1<<20))
	}
	waitFor(minPercent)
	if int(set.Load()) != minPercent {
		t.Errorf("last target set %d, want %d", set.Load(), minPercent)
	}
	keep = nil
	waitFor(maxPercent)
}

func liveMiB() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc >> 20
}
