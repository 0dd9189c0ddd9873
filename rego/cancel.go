package rego

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/topdown"
)

// evalCancel stops one evaluation when its caller's context ends or its time is up. OPA
// asks Cancelled before every expression it evaluates (and in its long-running builtins'
// loops); every 64th time this one also reads the clock and the context. A timer and a
// context.AfterFunc per evaluation, which it replaces, cost more than the evaluation's
// rules on the path of a request the decision cache has not seen; a runaway evaluation is
// stopped as before, at most 63 expressions after its deadline.
type evalCancel struct {
	flag     atomic.Bool
	timedOut atomic.Bool
	calls    atomic.Uint32
	done     <-chan struct{}
	start    time.Time
	timeout  time.Duration
}

var _ topdown.Cancel = (*evalCancel)(nil)

func newEvalCancel(ctx context.Context, timeout time.Duration) *evalCancel {
	return &evalCancel{done: ctx.Done(), start: time.Now(), timeout: timeout}
}

func (c *evalCancel) Cancel() { c.flag.Store(true) }

func (c *evalCancel) Cancelled() bool {
	if c.flag.Load() {
		return true
	}
	if c.calls.Add(1)&63 != 0 {
		return false
	}
	select {
	case <-c.done:
		c.flag.Store(true)
		return true
	default:
	}
	if time.Since(c.start) > c.timeout {
		c.timedOut.Store(true)
		c.flag.Store(true)
		return true
	}
	return false
}
