package rego

import (
	"context"
	"testing"
)

// Red team: the load check reads the host lists in the data documents only. A policy
// directory may also define data.hosts.<list> with rules (package hosts), and the shipped
// rules read those entries just the same: an entry with ports ["443"] or false, or a host
// that is also in a data list, loads unchecked, and the list's rules silently skip the host
// (github's write approval), leaving the registry entry's read_posts allow. The policy must
// not load, or the POST must stay held.
func TestRT2HostListsDefinedByRules(t *testing.T) {
	noGH := shippedDataWith(t, func(h map[string]any) {
		h["registries"].(map[string]any)["x.example"] = map[string]any{"ecosystem": "Go", "read_posts": []any{"/q"}}
		delete(h, "github")
	})
	for name, rules := range map[string]string{
		"ports as strings": "package hosts\n\ngithub := {\"github.com\": {\"authenticated\": true}, \"x.example\": {\"authenticated\": true, \"ports\": [\"443\"]}}\n",
		"entry false":      "package hosts\n\ngithub[\"x.example\"] := false\n",
		"comprehension":    "package hosts\n\ngithub[h] := {\"authenticated\": true, \"ports\": [\"443\"]} if some h in {\"x.example\"}\n",
	} {
		dir := t.TempDir()
		writeShippedRulesOnly(t, dir)
		writeFiles(t, dir, map[string]string{"data.json": noGH, "hosts.rego": rules})
		e, err := New(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout})
		if err != nil {
			continue // refused: held
		}
		d, err := e.Decide(context.Background(), requestInput("POST", "x.example", "/q"))
		if err != nil || d.Action != ActionApprove && d.Action != ActionDeny {
			t.Errorf("%s: github list defined by rules loaded unchecked; POST x.example/q → %s by %q (%v), want it held (github.write) or the policy refused",
				name, d.Action, d.Rule, err)
		}
	}
}

// Red team (false positive): OPA compares numbers by value, so ports [443.0] (or 4.43e2)
// matches a request to port 443 and the shipped rules read the entry as intended, but the
// check refuses it as "not a list of port numbers": a valid config does not load.
func TestRT2PortsWholeFloatLoad(t *testing.T) {
	for _, raw := range []string{"443.0", "4.43e2"} {
		e, err := githubPortsPolicy(t, raw)
		if err != nil {
			t.Errorf("ports [%s] refused: %v", raw, err)
			continue
		}
		if d, err := e.Decide(context.Background(), requestInput("POST", "x.example", "/q")); err != nil || d.Action != ActionApprove {
			t.Errorf("ports [%s]: POST x.example/q → %s by %q (%v), want approve", raw, d.Action, d.Rule, err)
		}
	}
}

// githubPortsPolicy loads the shipped rules with one GitHub host, x.example, whose ports
// setting is the JSON text ports.
func githubPortsPolicy(t *testing.T, ports string) (*Engine, error) {
	t.Helper()
	dir := t.TempDir()
	writeShippedRulesOnly(t, dir)
	writeFiles(t, dir, map[string]string{"data.json": `{"hosts":{"github":{"x.example":{"authenticated":true,"ports":[` + ports + `]}}}}`})
	return New(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout})
}
