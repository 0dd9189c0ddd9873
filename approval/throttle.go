package approval

import (
	"sync"
	"time"
)

// Sign-in throttling: a client address that fails more than this many times within the
// window gets 429 (with Retry-After) for its further failures until the window ends. Only
// failures are counted and only failures are refused: a right token is accepted from any
// address at any time, so failures made by someone else (from another address, or sharing
// this one) can never lock an approver out.
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

// fail counts a failure of key and returns, once key has failed more than max times in the
// window, how long is left of it (0: still within the limit).
func (t *throttle) fail(key string, now time.Time) time.Duration {
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
	if w.n <= t.max {
		return 0
	}
	return w.start.Add(t.window).Sub(now)
}

// reset forgets key's failures (after it succeeded).
func (t *throttle) reset(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.keys, key)
}
