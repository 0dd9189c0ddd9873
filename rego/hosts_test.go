package rego

import (
	"context"
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
)

// shippedDataWith returns the shipped data.json with edit applied to its host lists.
func shippedDataWith(t *testing.T, edit func(hosts map[string]any)) string {
	t.Helper()
	b, err := fs.ReadFile(ShippedPolicy(), "data.json")
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(b, &data); err != nil {
		t.Fatal(err)
	}
	edit(data["hosts"].(map[string]any))
	out, err := json.Marshal(data)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// A host-list entry the shipped rules read that is not an object would make their bare
// membership test fail and their rules silently not apply, handing the host to another
// list's rules (red team: github {"x": false} plus a registries entry let POST through). Such
// data does not load, the error names the entry, and the last good policy keeps deciding.
func TestHostEntriesMustBeObjects(t *testing.T) {
	dir := t.TempDir()
	writeShippedRules(t, dir)
	both := func(h map[string]any) {
		h["registries"].(map[string]any)["x.example"] = map[string]any{"read_posts": []any{"/q"}}
		h["github"].(map[string]any)["x.example"] = map[string]any{"authenticated": true}
	}
	good := shippedDataWith(t, both)
	writeFiles(t, dir, map[string]string{"data.json": good})
	e, err := New(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout})
	if err != nil {
		t.Fatal(err)
	}
	post := requestInput("POST", "x.example", "/q")
	want, err := e.Decide(context.Background(), post)
	if err != nil {
		t.Fatal(err)
	}
	if want.Action != ActionApprove {
		t.Fatalf("POST to a host in github and registries: %s by %q, want github's approval to win", want.Action, want.Rule)
	}
	goodRev := e.Revision()

	bad := []struct {
		name    string
		edit    func(h map[string]any)
		wantErr string
	}{
		{"false entry", func(h map[string]any) {
			h["github"].(map[string]any)["x.example"] = false
		}, `data.hosts.github["x.example"] is false, want an object`},
		{"null entry", func(h map[string]any) {
			h["github"].(map[string]any)["x.example"] = nil
		}, `data.hosts.github["x.example"] is null`},
		{"true entry", func(h map[string]any) {
			h["mcp"].(map[string]any)["x.example"] = true
		}, `data.hosts.mcp["x.example"] is true`},
		{"string entry", func(h map[string]any) {
			h["internal_api"].(map[string]any)["x.example"] = "yes"
		}, `data.hosts.internal_api["x.example"] is a string`},
		{"list entry", func(h map[string]any) {
			h["tunnel"] = map[string]any{"x.example": []any{443}}
		}, `data.hosts.tunnel["x.example"] is a list`},
		{"list not an object", func(h map[string]any) {
			h["registries"] = []any{"x.example"}
		}, `data.hosts.registries is a list, want an object keyed by host`},
		{"upper case host", func(h map[string]any) {
			h["github"].(map[string]any)["X.example"] = map[string]any{}
		}, `host "X.example" must be lower case`},
		{"trailing dot", func(h map[string]any) {
			h["github"].(map[string]any)["x.example."] = map[string]any{}
		}, `host "x.example." must be lower case without a trailing dot`},
	}
	for _, c := range bad {
		data := shippedDataWith(t, func(h map[string]any) {
			both(h)
			c.edit(h)
		})
		writeFiles(t, dir, map[string]string{"data.json": data})
		err := e.Reload(context.Background())
		if err == nil || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: Reload error %v, want one saying %q", c.name, err, c.wantErr)
		}
		if e.Revision() != goodRev {
			t.Errorf("%s: revision changed to %s; the last good policy must stay", c.name, e.Revision())
		}
		got, err := e.Decide(context.Background(), post)
		if err != nil || got.Action != want.Action || got.Rule != want.Rule {
			t.Errorf("%s: POST decided %s by %q (%v), want the last good policy's %s by %q", c.name, got.Action, got.Rule, err, want.Action, want.Rule)
		}
	}

	// A list of the policy's own may key hosts to anything its rules expect.
	writeFiles(t, dir, map[string]string{"data.json": shippedDataWith(t, func(h map[string]any) {
		h["mine"] = map[string]any{"x.example": true, "y.example": false}
	})})
	if err := e.Reload(context.Background()); err != nil {
		t.Errorf("a custom host list with boolean entries: %v", err)
	}
}
