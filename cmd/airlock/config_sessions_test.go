package main

import (
	"strings"
	"testing"
	"time"
)

// TestSessionsConfigBounds: a default above its bound is refused, naming both keys.
func TestSessionsConfigBounds(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  SessionsConfig
		want string
	}{
		{"ttl over max_ttl", SessionsConfig{TTL: 3 * time.Hour, MaxTTL: time.Hour}, "sessions.ttl: 3h0m0s is longer than sessions.max_ttl 1h0m0s"},
		{"idle over max_idle", SessionsConfig{IdleTimeout: time.Hour, MaxIdleTimeout: time.Minute}, "sessions.idle_timeout: 1h0m0s is longer than sessions.max_idle_timeout 1m0s"},
		{"negative max_idle", SessionsConfig{MaxIdleTimeout: -time.Second}, "sessions.max_idle_timeout"},
		{"within", SessionsConfig{TTL: time.Hour, MaxTTL: 2 * time.Hour, IdleTimeout: time.Minute, MaxIdleTimeout: time.Hour}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.validate()
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("got %v, want %q", err, c.want)
			}
		})
	}
}
