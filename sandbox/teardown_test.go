package sandbox

import (
	"context"
	"errors"
	"sync"
	"testing"
)

func TestTeardownRunsOnceAndSharesItsError(t *testing.T) {
	var td Teardown
	if td.Closed() {
		t.Fatal("zero Teardown reports closed")
	}
	boom := errors.New("boom")
	calls := 0
	var mu sync.Mutex
	teardown := func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if ctx.Err() != nil {
			t.Errorf("teardown got a cancelled context: %v", ctx.Err())
		}
		return boom
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // teardown must not inherit the cancellation
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = td.Close(ctx, teardown)
		}()
	}
	wg.Wait()
	if calls != 1 {
		t.Errorf("teardown ran %d times, want 1", calls)
	}
	for i, err := range errs {
		if !errors.Is(err, boom) {
			t.Errorf("Close #%d = %v, want %v", i, err, boom)
		}
	}
	if !td.Closed() {
		t.Error("Closed() = false after Close")
	}
}
