package rego

import (
	"context"
	"strings"
	"testing"
)

// Red team: entries that are objects, but whose settings the shipped rules read with a
// type they do not expect, make a list's rules silently not apply just as a false entry
// did, handing the host to another list's rules (github's write approval skipped, the
// registry's read_posts allow wins). The data must not load, or the decision must stay.
func TestRTHostEntrySettingsShapes(t *testing.T) {
	dir := t.TempDir()
	writeShippedRules(t, dir)
	both := func(h map[string]any) {
		h["github"].(map[string]any)["x.example"] = map[string]any{"authenticated": true}
	}
	writeFiles(t, dir, map[string]string{"data.json": shippedDataWith(t, both)})
	e, err := New(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	post := requestInput("POST", "x.example", "/q")
	want, err := e.Decide(context.Background(), post)
	if err != nil || want.Action != ActionApprove {
		t.Fatalf("baseline: %+v %v", want, err)
	}
	for _, c := range []struct {
		name string
		gh   any
	}{
		{"ports as strings", map[string]any{"authenticated": true, "ports": []any{"443"}}},
		{"ports a number", map[string]any{"authenticated": true, "ports": 443}},
		{"ports null", map[string]any{"authenticated": true, "ports": nil}},
		{"ports nested list", map[string]any{"authenticated": true, "ports": []any{[]any{443}}}},
	} {
		writeFiles(t, dir, map[string]string{"data.json": shippedDataWith(t, func(h map[string]any) {
			both(h)
			h["github"].(map[string]any)["x.example"] = c.gh
		})})
		rerr := e.Reload(context.Background())
		if rerr == nil || !strings.Contains(rerr.Error(), `data.hosts.github["x.example"].ports`) {
			t.Errorf("%s: Reload error %v, want one naming the ports setting", c.name, rerr)
		}
		got, err := e.Decide(context.Background(), post)
		if rerr == nil && (err != nil || got.Action != want.Action) {
			t.Errorf("%s: data loaded (no error) and POST x.example/q is now %s by %q (%v), was %s by %q",
				c.name, got.Action, got.Rule, err, want.Action, want.Rule)
		}
	}
}

// Red team: the load check takes a host key for "as the policy input has it" when it is
// its own lower case, but the input's host is ASCII (IDNA ToASCII, hostname.Normalize):
// a key in Unicode, with a port or with spaces loads and never matches, so the list's rules
// silently do not apply to the host the operator named (here github's write approval,
// leaving the punycode registry entry's allow), the failure class the check was made for.
func TestRTHostKeysNotAsTheInputHasThem(t *testing.T) {
	for _, key := range []string{"bücher.example", "xn--bcher-kva.example:443", " xn--bcher-kva.example"} {
		dir := t.TempDir()
		writeShippedRules(t, dir)
		writeFiles(t, dir, map[string]string{"data.json": shippedDataWith(t, func(h map[string]any) {
			h["registries"].(map[string]any)["xn--bcher-kva.example"] = map[string]any{"ecosystem": "Go", "read_posts": []any{"/q"}}
			h["github"].(map[string]any)[key] = map[string]any{"authenticated": true}
		})})
		e, err := New(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout})
		if err != nil {
			continue // refused: held
		}
		d, err := e.Decide(context.Background(), requestInput("POST", "xn--bcher-kva.example", "/q"))
		t.Errorf("github key %q loaded; POST xn--bcher-kva.example/q: %s by %q (%v)", key, d.Action, d.Rule, err)
	}
}
