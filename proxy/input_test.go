package proxy

import (
	"strings"
	"testing"
)

// lowerHeader's table must give what strings.ToLower gives, for its names and others.
func TestLowerHeaderIsToLower(t *testing.T) {
	names := []string{"X-Custom", "user-agent", "ÄÖ-Ü", "", "Content-Type"}
	for k := range lowerNames {
		names = append(names, k)
	}
	for _, k := range names {
		if got, want := lowerHeader(k), strings.ToLower(k); got != want {
			t.Errorf("lowerHeader(%q) = %q, want %q", k, got, want)
		}
	}
	if got := lowerHeader("Accept"); got != "accept" {
		t.Errorf("lowerHeader(Accept) = %q", got)
	}
}
