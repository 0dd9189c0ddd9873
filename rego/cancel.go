package rego

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/topdown"
)

// evalCancel stops one evaluation when its caller's context ends or its time is up. OPA
// asks Cancelled before every expression it evaluates (and in its long-running builtins'
// loops): the context is read there, without a context.AfterFunc, and the timeout is a
// timer kept with the evalCancel in a pool, reset for each evaluation, so that a request
// the decision cache has not seen pays neither for a new timer nor for the context's
// watch. The evaluation stops at the first expression after its deadline or its
// context's end, as with a timer and a watch of its own (red team: a check every 64th
// expression let an agent whose input made one expression slow run 12x past the timeout).
type evalCancel struct {
	flag     atomic.Bool
	timedOut atomic.Bool
	done     <-chan struct{}
	timer    *time.Timer
}

var _ topdown.Cancel = (*evalCancel)(nil)

var cancelPool sync.Pool

// startEvalCancel returns an evalCancel for ctx whose timer fires after timeout. Its
// stop must be called once the evaluation has ended and its outcome been read.
func startEvalCancel(ctx context.Context, timeout time.Duration) *evalCancel {
	c, _ := cancelPool.Get().(*evalCancel)
	if c == nil {
		c = &evalCancel{}
		c.timer = time.AfterFunc(timeout, c.expire)
	} else {
		c.timer.Reset(timeout)
	}
	c.done = ctx.Done()
	return c
}

func (c *evalCancel) expire() {
	c.timedOut.Store(true)
	c.flag.Store(true)
}

// stop ends the evaluation's timer. An evalCancel whose timer has fired, or is firing,
// is not reused: its expire could land on the next evaluation.
func (c *evalCancel) stop() {
	if !c.timer.Stop() {
		return
	}
	c.done = nil
	c.flag.Store(false)
	c.timedOut.Store(false)
	cancelPool.Put(c)
}

func (c *evalCancel) Cancel() { c.flag.Store(true) }

func (c *evalCancel) Cancelled() bool {
	if c.flag.Load() {
		return true
	}
	if c.done == nil {
		return false
	}
	select {
	case <-c.done:
		c.flag.Store(true)
		return true
	default:
		return false
	}
}
