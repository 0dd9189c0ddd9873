package rego

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// enteredRules lists the files of the deny, approve and allow rules an evaluation of in
// entered (OPA's trace: "file.rego:LINE | Enter data.airlock.allow"), sorted, each once.
func enteredRules(t *testing.T, e *Engine, in *Input) []string {
	t.Helper()
	_, trace, err := e.Eval(context.Background(), in, true)
	if err != nil {
		t.Fatalf("Eval: %v", err)
	}
	re := regexp.MustCompile(`^(\w+\.rego):\d+\s.*Enter data\.airlock\.(allow|deny|approve)$`)
	var files []string
	for line := range strings.SplitSeq(trace, "\n") {
		if m := re.FindStringSubmatch(strings.TrimSpace(line)); m != nil && !slices.Contains(files, m[1]) {
			files = append(files, m[1])
		}
	}
	slices.Sort(files)
	return files
}

// OPA's rule index keeps a request out of the rules of host lists its host is not on: the
// shipped rules test membership with a bare data.hosts.<list>[input.request.host], which
// the index reads (a binding such as `gh := data.hosts.github[...]` alone it does not). An
// uncached evaluation thus costs the rules of one list, however long the others are
// (BenchmarkDecideAllowlist10k). A rule written without the bare test shows up here as a
// file entered for a host it cannot concern.
func TestShippedRulesAreIndexedByHostList(t *testing.T) {
	e, err := New(context.Background(), Options{NoDecisionCache: true, Timeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	mcpCall := benchInput("POST", "mcp.internal.example", "/mcp")
	mcpCall.Request.MCP = &MCPInput{Method: "tools/call", Tool: "search_issues"}
	connect := &Input{Version: 1, Phase: PhaseConnect, Request: RequestInput{Method: "CONNECT", Host: "github.com", Port: 443}}
	for _, tc := range []struct {
		name string
		in   *Input
		want []string // besides airlock.rego's own rules (the input.version check)
	}{
		{"registry read", benchInput("GET", "proxy.golang.org", "/x/@v/list"), []string{"registries.rego"}},
		{"registry publish", benchInput("PUT", "registry.npmjs.org", "/pkg"), []string{"registries.rego"}},
		{"github read", benchInput("GET", "api.github.com", "/repos/o/r"), []string{"github.rego"}},
		{"github write", benchInput("POST", "api.github.com", "/repos/o/r/issues"), []string{"github.rego"}},
		{"internal api", benchInput("GET", "api.internal.example", "/v1/things"), []string{"internal_api.rego"}},
		{"mcp tool call", mcpCall, []string{"mcp.rego"}},
		{"connect", connect, []string{"github.rego"}},
		{"unlisted host", benchInput("GET", "unlisted.example.com", "/"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := append([]string{"airlock.rego"}, tc.want...)
			slices.Sort(want)
			if got := enteredRules(t, e, tc.in); !slices.Equal(got, want) {
				t.Errorf("rules entered from %v, want only %v", got, want)
			}
		})
	}
}
