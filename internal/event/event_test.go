package event

import (
	"slices"
	"testing"
)

// The strings are the audit log's wire format: a renamed constant must not change them.
func TestWireValues(t *testing.T) {
	want := []string{"allow", "deny", "approve", "approved", "would_deny", "error", "tunnel", "lifecycle"}
	var got []string
	for _, d := range Decisions() {
		got = append(got, string(d))
	}
	if !slices.Equal(got, want) {
		t.Errorf("Decisions() = %q, want %q", got, want)
	}
	kinds := map[Kind]string{KindRequest: "request", KindConnect: "connect", KindCredentialWithheld: "credential.withheld",
		KindRefusalsSuppressed: "refusals.suppressed", KindCheckpoint: "checkpoint", KindSandboxStart: "sandbox.start",
		KindSandboxRun: "sandbox.run", KindSandboxEnd: "sandbox.end", KindSandboxExec: "sandbox.exec"}
	for k, s := range kinds {
		if string(k) != s {
			t.Errorf("kind %q, want %q", k, s)
		}
	}
}

func TestRefused(t *testing.T) {
	for _, d := range Decisions() {
		if got, want := d.Refused(), d == DecisionDeny || d == DecisionError; got != want {
			t.Errorf("%s.Refused() = %v, want %v", d, got, want)
		}
	}
}
