package proxy

import "sync"

// heldBudget bounds what requests waiting for approval keep in airlock's memory: per
// sandbox, how many wait at once and how many body bytes they buffer together; and the body
// bytes of all sandboxes together. One sandbox at its bounds is refused; the others are not
// touched (unless the total bound, a last line of defence, is reached).
type heldBudget struct {
	maxPending int   // per sandbox
	maxBytes   int64 // per sandbox
	maxTotal   int64 // all sandboxes

	mu    sync.Mutex
	total int64
	per   map[string]*heldUse
}

type heldUse struct {
	pending int
	bytes   int64
}

// budgetVerdict says which bound a reservation met.
type budgetVerdict int

const (
	budgetOK budgetVerdict = iota
	budgetSandboxPending
	budgetSandboxBytes
	budgetTotalBytes
)

func newHeldBudget(maxPending int, maxBytes, maxTotal int64) *heldBudget {
	return &heldBudget{maxPending: maxPending, maxBytes: maxBytes, maxTotal: maxTotal, per: map[string]*heldUse{}}
}

// enter counts one more waiting request for sandbox, unless it already has maxPending.
func (b *heldBudget) enter(sandbox string) budgetVerdict {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.per[sandbox]
	if u == nil {
		u = &heldUse{}
		b.per[sandbox] = u
	}
	if u.pending >= b.maxPending {
		return budgetSandboxPending
	}
	u.pending++
	return budgetOK
}

// grow reserves n more body bytes for one of sandbox's waiting requests (after enter).
func (b *heldBudget) grow(sandbox string, n int64) budgetVerdict {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.per[sandbox]
	switch {
	case u == nil || u.bytes+n > b.maxBytes:
		return budgetSandboxBytes
	case b.total+n > b.maxTotal:
		return budgetTotalBytes
	}
	u.bytes += n
	b.total += n
	return budgetOK
}

// leave ends one of sandbox's waiting requests, which had reserved bytes.
func (b *heldBudget) leave(sandbox string, bytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.per[sandbox]
	if u == nil {
		return
	}
	u.pending--
	u.bytes -= bytes
	b.total -= bytes
	if u.pending <= 0 {
		delete(b.per, sandbox)
	}
}

// usage reports what sandbox holds now (for refusals and tests).
func (b *heldBudget) usage(sandbox string) (pending int, bytes, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if u := b.per[sandbox]; u != nil {
		pending, bytes = u.pending, u.bytes
	}
	return pending, bytes, b.total
}
