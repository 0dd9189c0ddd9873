package rego

import (
	"context"
	"slices"
	"testing"
)

// Red team (round 3): checkHostRules refuses rules whose heads define data.hosts.<list>, but
// a rule may replace a list for the evaluation of the shipped rules with `with`: here a
// custom rule evaluates the shipped allow set with data.hosts.github replaced by an entry
// the load check never saw (x.example, authenticated), and the shipped github.read rule
// hands x.example the GitHub credential. The list is a rule's, not data, and escapes the
// check all the same. The policy must not load (refuse `with data.hosts...`), or the
// decision must not carry the GitHub credential for a host not in data.hosts.github.
func TestRT3HostListReplacedWithWith(t *testing.T) {
	dir := t.TempDir()
	writeShippedRules(t, dir)
	writeFiles(t, dir, map[string]string{
		"data.json":    shippedDataWith(t, func(map[string]any) {}),
		"rtw.rego":     "package rtw\n\ngh := a if {\n\ta := data.airlock.allow with data.hosts.github as {\"x.example\": {\"authenticated\": true}}\n}\n",
		"zz_wrap.rego": "package airlock\n\napprove contains d if {\n\tinput.request.host == \"x.example\"\n\tsome d in data.rtw.gh\n}\n",
	})
	e, err := New(context.Background(), Options{Dir: dir, Timeout: testEvalTimeout})
	if err != nil {
		return // refused: held
	}
	d, err := e.Decide(context.Background(), requestInput("GET", "x.example", "/x"))
	if err == nil && slices.ContainsFunc(d.Credentials, func(c string) bool { return c != "" }) {
		t.Errorf("a host list made with `with` loaded unchecked: GET x.example/x → %s by %q with credentials %v", d.Action, d.Rule, d.Credentials)
	}
}
