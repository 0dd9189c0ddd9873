package rego

import (
	"context"
	"testing"
)

func TestDecisionCacheFollowsWhatThePolicyReads(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name, policy string
		cacheable    bool
	}{
		{"host and path only", `package airlock
decision := {"action": "allow", "rule": "r"} if input.request.host == "a.example"`, true},
		{"reads the query (part of the key)", `package airlock
decision := {"action": "allow", "rule": "r"} if input.request.query.a[0] == "1"`, true},
		{"reads headers", `package airlock
decision := {"action": "allow", "rule": "r"} if input.request.headers["x-a"][0] == "1"`, false},
		{"reads the whole request", `package airlock
decision := {"action": "allow", "rule": "r"} if count(input.request) > 0`, false},
		{"calls time", `package airlock
decision := {"action": "allow", "rule": "r"} if time.now_ns() > 0`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"p.rego": tt.policy})
			e, err := New(ctx, Options{Dir: dir, Timeout: testTimeout})
			if err != nil {
				t.Fatal(err)
			}
			if got := e.cur.Load().cache != nil; got != tt.cacheable {
				t.Errorf("cacheable = %v, want %v", got, tt.cacheable)
			}
		})
	}
}

func TestDecisionCacheIsPerSandboxAndPerPolicy(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": `package airlock
default decision := {"action": "deny", "rule": "d"}
decision := {"action": "allow", "rule": "team"} if input.sandbox.labels.team == "blue"`})
	e, err := New(ctx, Options{Dir: dir, Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	in := func(team string) *Input {
		return &Input{Version: 1, Phase: PhaseRequest, Sandbox: SandboxInput{ID: "s", Labels: map[string]string{"team": team}},
			Request: RequestInput{Method: "GET", Scheme: "https", Host: "a.example", Port: 443, Path: "/"}}
	}
	for i := 0; i < 2; i++ { // the second round answers from the cache
		if d, _ := e.Decide(ctx, in("blue")); d.Rule != "team" {
			t.Fatalf("round %d blue: rule %q, want team", i, d.Rule)
		}
		if d, _ := e.Decide(ctx, in("red")); d.Rule != "d" {
			t.Fatalf("round %d red: rule %q, want d (labels are part of the key)", i, d.Rule)
		}
	}
	writeFiles(t, dir, map[string]string{"p.rego": `package airlock
default decision := {"action": "deny", "rule": "changed"}`})
	if err := e.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if d, _ := e.Decide(ctx, in("blue")); d.Rule != "changed" {
		t.Errorf("after reload: rule %q, want changed (a reload empties the cache)", d.Rule)
	}
}

func TestDecisionCacheKeysOnTheQueryWhenRead(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"p.rego": `package airlock
default decision := {"action": "deny", "rule": "d"}
decision := {"action": "allow", "rule": "q"} if input.request.query.service[0] == "git-upload-pack"`})
	e, err := New(ctx, Options{Dir: dir, Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	in := func(svc string) *Input {
		return &Input{Version: 1, Phase: PhaseRequest, Sandbox: SandboxInput{ID: "s"},
			Request: RequestInput{Method: "GET", Scheme: "https", Host: "a.example", Port: 443, Path: "/info/refs",
				Query: map[string][]string{"service": {svc}}}}
	}
	for i := 0; i < 2; i++ {
		if d, _ := e.Decide(ctx, in("git-upload-pack")); d.Rule != "q" {
			t.Fatalf("round %d upload-pack: rule %q, want q", i, d.Rule)
		}
		if d, _ := e.Decide(ctx, in("git-receive-pack")); d.Rule != "d" {
			t.Fatalf("round %d receive-pack: rule %q, want d (the query is part of the key)", i, d.Rule)
		}
	}
}

// An MCP call's id and arguments are in the key only when the policy reads them: calls that
// differ only in their id share one entry when it does not, and arguments still decide when
// the policy reads them.
func TestDecisionCacheKeysOnMCPFieldsWhenRead(t *testing.T) {
	ctx := context.Background()
	call := func(id, args string) *Input {
		return &Input{Version: 1, Phase: PhaseRequest, Sandbox: SandboxInput{ID: "s"},
			Request: RequestInput{Method: "POST", Scheme: "https", Host: "mcp.example", Port: 443, Path: "/mcp",
				MCP: &MCPInput{Method: "tools/call", Tool: "update_issue", ID: mustJSON(t, id), Arguments: mustJSON(t, args)}}}
	}
	calls := []struct{ id, args string }{{"1", `{"state":"open"}`}, {"2", `{"state":"open"}`}, {"3", `{"state":"closed"}`}, {"1", `{"state":"open"}`}}
	for _, tc := range []struct {
		rule, cond string
		want       [4]string // the rule deciding each of calls
		entries    int       // cache entries afterwards
	}{
		{"tool", `input.request.mcp.tool == "update_issue"`, [4]string{"tool", "tool", "tool", "tool"}, 1},
		{"args", `input.request.mcp.arguments.state == "open"`, [4]string{"args", "args", "d", "args"}, 2},
		{"id", `input.request.mcp.id == 1`, [4]string{"id", "d", "d", "id"}, 3},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"p.rego": `package airlock
default decision := {"action": "deny", "rule": "d"}
decision := {"action": "allow", "rule": "` + tc.rule + `"} if ` + tc.cond})
			e, err := New(ctx, Options{Dir: dir, Timeout: testTimeout})
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range calls {
				if d, err := e.Decide(ctx, call(c.id, c.args)); err != nil || d.Rule != tc.want[i] {
					t.Fatalf("id %s arguments %s: rule %q (%v), want %q", c.id, c.args, d.Rule, err, tc.want[i])
				}
			}
			if got := len(e.cur.Load().cache.m); got != tc.entries {
				t.Errorf("%d cache entries, want %d", got, tc.entries)
			}
		})
	}
}
