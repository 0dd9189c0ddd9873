package approval

import (
	"sync"
	"time"
)

// Sign-in throttling: a client address, or an approver name, that fails this many times
// within the window is refused (429) until the window ends.
const (
	loginFailures   = 10
	loginWindow     = 15 * time.Minute
	maxThrottleKeys = 10000
	// overflowKey counts the failures of keys that find the table full: when that many
	// different addresses fail at once, they share one window.
	overflowKey = "\x00overflow"
)

// throttle counts failures per key in fixed windows. The zero value is not usable: see
// newThrottle.
type throttle struct {
	mu     sync.Mutex
	max    int
	window time.Duration
	keys   map[string]*window
}

type window struct {
	start time.Time
	n     int
}

func newThrottle(max int, w time.Duration) *throttle {
	return &throttle{max: max, window: w, keys: map[string]*window{}}
}

// wait returns how long key must wait before it may try again (0: now).
func (t *throttle) wait(key string, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.keys[key]
	if !ok {
		w = t.keys[overflowKey]
	}
	if w == nil || w.n < t.max {
		return 0
	}
	if left := w.start.Add(t.window).Sub(now); left > 0 {
		return left
	}
	return 0
}

// fail counts a failure of key.
func (t *throttle) fail(key string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.keys[key]
	if !ok && len(t.keys) >= maxThrottleKeys {
		for k, v := range t.keys {
			if now.Sub(v.start) >= t.window {
				delete(t.keys, k)
			}
		}
		if len(t.keys) >= maxThrottleKeys {
			key = overflowKey
			w, ok = t.keys[key]
		}
	}
	if !ok || now.Sub(w.start) >= t.window {
		w = &window{start: now}
		t.keys[key] = w
	}
	w.n++
}

// reset forgets key's failures (after it succeeded).
func (t *throttle) reset(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.keys, key)
}
