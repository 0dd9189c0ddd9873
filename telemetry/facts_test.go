package telemetry

import (
	"testing"

	"github.com/airlock-proxy/airlock/internal/event"
)

// Every decision airlock writes is a label of its own; only an unknown value is "other".
func TestDecisionLabelNamesEveryDecision(t *testing.T) {
	for _, d := range event.Decisions() {
		if got := decisionLabel(d); got != string(d) {
			t.Errorf("decisionLabel(%q) = %q, want %q", d, got, d)
		}
	}
	for d, want := range map[event.Decision]string{"": "deny", "maybe": "other", "ALLOW": "other"} {
		if got := decisionLabel(d); got != want {
			t.Errorf("decisionLabel(%q) = %q, want %q", d, got, want)
		}
	}
}
