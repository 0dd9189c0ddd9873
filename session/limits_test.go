package session_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/session"
)

// starts records the limits each sandbox started with (its start event).
type starts struct {
	mu  sync.Mutex
	evs map[string]sandbox.Event
}

func (s *starts) record(_ context.Context, ev sandbox.Event) {
	if ev.Kind != sandbox.EventStart {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evs[ev.SandboxID] = ev
}

func (s *starts) of(id string) sandbox.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.evs[id]
}

// TestCreateLimits: a create gets at most what the server's config allows (sandbox.memory,
// sandbox.pids, sandbox.cpus, sandbox.timeout, sessions.max_ttl, sessions.max_idle_timeout,
// sessions.workspace_roots); asking for more is a 400 naming the key and its value, never
// silently more; an omitted limit is the server's.
func TestCreateLimits(t *testing.T) {
	st := &starts{evs: map[string]sandbox.Event{}}
	e := newEnv(t, func(o *session.Options) {
		o.Base = sandbox.Options{Backend: &native.Native{StateDir: testState}, Memory: 256 << 20, Pids: 100, CPUs: 1, OnEvent: st.record}
		o.MaxTTL, o.TTL = 2*time.Hour, 30*time.Minute
		o.MaxIdleTimeout, o.IdleTimeout = 20*time.Minute, 5*time.Minute
		o.MaxExecTimeout = time.Second
	})
	for _, c := range []struct {
		name string
		spec session.Spec
		says string
	}{
		{"memory", session.Spec{Memory: "1G"}, "memory 1G is more than this airlock allows: sandbox.memory is 256M"},
		{"pids", session.Spec{Pids: 101}, "pids 101 is more than this airlock allows: sandbox.pids is 100"},
		{"cpus", session.Spec{CPUs: 1.5}, "cpus 1.5 is more than this airlock allows: sandbox.cpus is 1"},
		{"ttl", session.Spec{TTL: "3h"}, "ttl 3h0m0s is more than this airlock allows: sessions.max_ttl is 2h0m0s"},
		{"idle_timeout", session.Spec{IdleTimeout: "1h"}, "idle_timeout 1h0m0s is more than this airlock allows: sessions.max_idle_timeout is 20m0s"},
		{"timeout", session.Spec{Timeout: "1m"}, "timeout 1m0s is more than this airlock allows: sandbox.timeout is 1s"},
		{"workspace", session.Spec{Workspace: "/etc"}, "sessions.workspace_roots"},
		{"memory not a size", session.Spec{Memory: "lots"}, "want a size such as 512M"},
		{"negative pids", session.Spec{Pids: -1}, "must be positive"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, b := e.do(t, "POST", "/v1/sandboxes", c.spec)
			if code != 400 || !strings.Contains(string(b), c.says) {
				t.Errorf("got %d %s, want 400 saying %q", code, b, c.says)
			}
		})
	}
	if n := len(e.m.List()); n != 0 {
		t.Fatalf("refused creates left %d sandboxes", n)
	}

	// Omitted: the server's values.
	info := e.create(t, session.Spec{})
	ev := st.of(info.ID)
	if ev.Memory != 256<<20 || ev.Pids != 100 || ev.CPUs != 1 {
		t.Errorf("defaults: memory %d pids %d cpus %g, want 256M, 100, 1", ev.Memory, ev.Pids, ev.CPUs)
	}
	if got := info.Expires.Sub(info.Created); got != 30*time.Minute {
		t.Errorf("default ttl: %s, want 30m", got)
	}
	if info.IdleTimeout != "5m0s" {
		t.Errorf("default idle timeout: %s, want 5m0s", info.IdleTimeout)
	}
	// sandbox.timeout is each command's default limit and its bound.
	if _, _, res, code := e.exec(t, info.ID, session.ExecRequest{Argv: []string{"sleep", "60"}}); code != 200 || !res.TimedOut || res.ExitCode != 124 {
		t.Errorf("a command without a timeout: %d %+v, want it timed out by sandbox.timeout", code, res)
	}
	if _, body, _, code := e.exec(t, info.ID, session.ExecRequest{Argv: []string{"true"}, Timeout: "10s"}); code != 400 || !strings.Contains(body, "sandbox.timeout is 1s") {
		t.Errorf("an exec over sandbox.timeout: %d %s, want 400 naming it", code, body)
	}

	// At the limits or under them: granted as asked.
	info = e.create(t, session.Spec{Memory: "256M", Pids: 50, CPUs: 0.5, TTL: "2h", IdleTimeout: "20m", Timeout: "1s"})
	ev = st.of(info.ID)
	if ev.Memory != 256<<20 || ev.Pids != 50 || ev.CPUs != 0.5 {
		t.Errorf("asked: memory %d pids %d cpus %g, want 256M, 50, 0.5", ev.Memory, ev.Pids, ev.CPUs)
	}
	if got := info.Expires.Sub(info.Created); got != 2*time.Hour || info.IdleTimeout != "20m0s" {
		t.Errorf("asked: ttl %s idle %s, want 2h and 20m", got, info.IdleTimeout)
	}
}

// TestLimitDefaults: without sandbox.memory and sandbox.pids the bounds are the backend's
// defaults; a ttl default above max_ttl is a configuration error naming both.
func TestLimitDefaults(t *testing.T) {
	e := newEnv(t, nil)
	code, b := e.do(t, "POST", "/v1/sandboxes", session.Spec{Pids: sandbox.DefaultPids + 1})
	if code != 400 || !strings.Contains(string(b), "sandbox.pids is 1024") {
		t.Errorf("pids over the default bound: %d %s", code, b)
	}
	code, b = e.do(t, "POST", "/v1/sandboxes", session.Spec{TTL: "25h"})
	if code != 400 || !strings.Contains(string(b), "sessions.max_ttl is 24h0m0s") {
		t.Errorf("ttl over the default max_ttl: %d %s", code, b)
	}
	_, err := session.New(session.Options{TTL: 3 * time.Hour, MaxTTL: time.Hour, StateDir: t.TempDir()}, nil)
	if err == nil || !strings.Contains(err.Error(), "sessions.ttl 3h0m0s is longer than sessions.max_ttl 1h0m0s") {
		t.Errorf("ttl over max_ttl: %v", err)
	}
}
