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

// A host-list entry the shipped rules read that is not an object, or whose settings are not
// of the types the rules read, would make their rules silently not apply, handing the host
// to another list's rules (red team: github {"x": false}, or github ports ["443"], plus a
// registries entry let a POST through as a read). Such data does not load, nor a host in
// two lists or written otherwise than the policy input has it; the error names the entry,
// and the last good policy keeps deciding.
func TestHostEntriesMustBeObjects(t *testing.T) {
	dir := t.TempDir()
	writeShippedRules(t, dir)
	both := func(h map[string]any) {
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
		t.Fatalf("POST to a GitHub host: %s by %q, want github's approval", want.Action, want.Rule)
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
		}, `host "X.example" is not written as the policy input has it ("x.example")`},
		{"trailing dot", func(h map[string]any) {
			h["github"].(map[string]any)["x.example."] = map[string]any{}
		}, `host "x.example." is not written as the policy input has it ("x.example")`},
		{"unicode host", func(h map[string]any) {
			h["github"].(map[string]any)["bücher.example"] = map[string]any{}
		}, `host "bücher.example" is not written as the policy input has it ("xn--bcher-kva.example")`},
		{"host with a port", func(h map[string]any) {
			h["github"].(map[string]any)["x.example:443"] = map[string]any{}
		}, `host "x.example:443" is not written as the policy input has it`},
		{"in two lists", func(h map[string]any) {
			h["registries"].(map[string]any)["x.example"] = map[string]any{"ecosystem": "Go", "read_posts": []any{"/q"}}
		}, `data.hosts.registries["x.example"]: x.example is also in data.hosts.github; a host belongs to one list`},
		{"ports as strings", func(h map[string]any) {
			h["github"].(map[string]any)["x.example"] = map[string]any{"authenticated": true, "ports": []any{"443"}}
		}, `data.hosts.github["x.example"].ports[0] is a string, want a port number, 1 to 65535`},
		{"port out of range", func(h map[string]any) {
			h["github"].(map[string]any)["x.example"] = map[string]any{"authenticated": true, "ports": []any{70000}}
		}, `.ports[0] is a number (70000), want a port number, 1 to 65535`},
		{"authenticated as a string", func(h map[string]any) {
			h["github"].(map[string]any)["x.example"] = map[string]any{"authenticated": "yes"}
		}, `data.hosts.github["x.example"].authenticated is a string, want true or false`},
		{"registry without ecosystem", func(h map[string]any) {
			h["registries"].(map[string]any)["y.example"] = map[string]any{}
		}, `data.hosts.registries["y.example"] has no "ecosystem"`},
		{"read_posts not paths", func(h map[string]any) {
			h["registries"].(map[string]any)["y.example"] = map[string]any{"ecosystem": "Go", "read_posts": []any{"q"}}
		}, `.read_posts[0] is a string, want a path starting with "/"`},
		{"mcp path missing", func(h map[string]any) {
			h["mcp"].(map[string]any)["y.example"] = map[string]any{"read_tools": []any{"a"}}
		}, `data.hosts.mcp["y.example"] has no "path"`},
		{"tenants a string", func(h map[string]any) {
			h["internal_api"].(map[string]any)["y.example"] = map[string]any{"credential": "c", "tenants": "acme"}
		}, `data.hosts.internal_api["y.example"].tenants is a string, want a list of strings`},
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

// data.body_aware names hosts as the policy input has them, or the policy does not load: a
// key in another form would never match, and the bodies of the host the operator meant would
// go unread, the policy deciding without them.
func TestBodyAwareHostsAsTheInputHasThem(t *testing.T) {
	for key, want := range map[string]string{
		"MCP.internal.example":    `host "MCP.internal.example" is not written as the policy input has it ("mcp.internal.example")`,
		"bücher.example":          `("xn--bcher-kva.example")`,
		"mcp.internal.example:80": `host "mcp.internal.example:80" is not written`,
		"":                        `host "" is not written`,
	} {
		_, err := bodyAwareOf(map[string]any{BodyAwareKey: map[string]any{key: []any{"/mcp"}}})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("body_aware key %q: %v, want an error containing %s", key, err, want)
		}
	}
	if _, err := bodyAwareOf(map[string]any{BodyAwareKey: map[string]any{"xn--bcher-kva.example": []any{"/mcp"}}}); err != nil {
		t.Errorf("a punycode key: %v", err)
	}
}
