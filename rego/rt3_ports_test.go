package rego

import (
	"context"
	"testing"
)

// Red team (round 3): wholeNumber now reads a json.Number through float64, so ports
// [443.0000000000000001] (or 4430000000000000001e-16) rounds to 443 and passes the load
// check, but OPA compares numbers exactly: 443 is not in the list, and every github rule
// silently skips the host (here a GET falls to default.deny). The check's promise, that an
// entry's settings are of the types the rules read, does not hold. The policy must not
// load, or the entry must work as the check read it.
func TestRT3PortsNotExactlyWholeRefused(t *testing.T) {
	for _, raw := range []string{"443.0000000000000001", "4430000000000000001e-16"} {
		e, err := githubPortsPolicy(t, raw)
		if err != nil {
			continue // refused: held
		}
		if d, err := e.Decide(context.Background(), requestInput("GET", "x.example", "/q")); err != nil || d.Action != ActionAllow {
			t.Errorf("ports [%s] loaded as whole 443, but GET x.example/q → %s by %q (%v): the github rules skip the entry", raw, d.Action, d.Rule, err)
		}
	}
}
