package sandbox

import (
	"context"
	"sync"
	"sync/atomic"
)

// Teardown makes a backend instance's Close idempotent and safe to call concurrently: the
// first Close runs the teardown, a concurrent or later Close waits for it and returns its
// error, and Closed reports from the first call on that the instance refuses new commands.
// The zero value is ready to use; a backend embeds one per instance.
type Teardown struct {
	closed atomic.Bool
	once   sync.Once
	err    error // set once by the first Close
}

// Close marks the instance closed and runs teardown once, with ctx's values but not its
// cancellation (a teardown cut short would leave resources behind).
func (t *Teardown) Close(ctx context.Context, teardown func(context.Context) error) error {
	t.closed.Store(true) // Run refuses from now on
	t.once.Do(func() { t.err = teardown(context.WithoutCancel(ctx)) })
	return t.err
}

// Closed reports whether Close has been called.
func (t *Teardown) Closed() bool { return t.closed.Load() }
