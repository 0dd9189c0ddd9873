// Package gctune lets the garbage collector run less often while the live heap is small.
//
// Go's default (GOGC=100) collects each time the heap has grown by as much as was live after
// the last collection. Most of airlock's live heap is its compiled policy and its clients,
// about 10 MiB at rest, which every collection marks again; under load the few kilobytes of
// garbage each request leaves bring a collection every 10 MiB or so, and the collector's
// work was a tenth of the proxy's CPU per request (docs/performance.md). Start raises the
// collector's target while the live heap is small, so that the heap grows to about its
// budget between collections, and returns it to 100 as the live heap reaches half the
// budget: a process holding thousands of idle connections collects as it would by default.
package gctune

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Default is the heap airlock lets grow between collections while its live heap is small:
// twice the default's collections' spacing at rest (10 MiB live), and a heap that 10,000
// idle connections leave within 300 MiB. 64 MiB with a 300% ceiling took 10,000 idle
// connections to 295-304 MiB; 48 MiB with 200% to 281-291 at the same throughput
// (docs/performance.md).
const Default = 48 << 20

// Bounds of the target (GOGC) Start sets.
const (
	minPercent = 100
	maxPercent = 200
)

// percentFor is the target that lets a heap whose live part is live grow to budget before
// the next collection, within [minPercent, maxPercent].
func percentFor(live, budget uint64) int {
	if live == 0 || live*(100+maxPercent) <= budget*100 {
		return maxPercent
	}
	p := int((budget*100)/live) - 100
	return max(minPercent, min(maxPercent, p))
}

type tuner struct {
	budget  uint64
	sample  []metrics.Sample
	set     func(int) int // debug.SetGCPercent, or a test's
	mu      sync.Mutex
	percent int // the target last set
}

var started sync.Once

// Start tunes the collector for the rest of the process's life, after each collection. It
// does nothing when the operator set GOGC in the environment, or when called again.
//
// The target is set by a finalizer, so it changes only when the runtime's finalizer
// goroutine gets to it: a finalizer elsewhere in the process that blocked would leave the
// last target in force (red team; none of airlock's block). It stays within [100, 200]
// either way, and the live heap it reads can count objects allocated during the marking.
func Start(budget uint64) {
	if os.Getenv("GOGC") != "" {
		return
	}
	started.Do(func() { start(budget, debug.SetGCPercent) })
}

func start(budget uint64, set func(int) int) *tuner {
	t := &tuner{budget: budget, set: set, percent: minPercent,
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.arm()
	return t
}

// sentinel becomes garbage as soon as it is made; its finalizer runs after the collection
// that found it so, adjusts the target and makes the next one.
type sentinel struct{ t *tuner }

func (t *tuner) arm() {
	runtime.SetFinalizer(&sentinel{t: t}, func(s *sentinel) {
		s.t.adjust()
		s.t.arm()
	})
}

func (t *tuner) adjust() {
	t.mu.Lock()
	defer t.mu.Unlock()
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	if p := percentFor(t.sample[0].Value.Uint64(), t.budget); p != t.percent {
		t.set(p)
		t.percent = p
	}
}

func (t *tuner) current() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.percent
}
