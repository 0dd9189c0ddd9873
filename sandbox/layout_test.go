package sandbox

import (
	"go/build"
	"slices"
	"strings"
	"testing"
)

// TestBackendsAreSiblings: the neutral package imports no backend (a backend is named by
// its caller in Options.Backend), and no backend imports another; each may use the neutral
// package and the seccomp allowlist.
func TestBackendsAreSiblings(t *testing.T) {
	const mod = "github.com/airlock-proxy/airlock/sandbox"
	allowed := map[string][]string{
		".":          nil,
		"native":     {mod, mod + "/seccomp"},
		"docker":     {mod, mod + "/seccomp"},
		"kubernetes": {mod},
	}
	for dir, ok := range allowed {
		p, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, imp := range p.Imports {
			if (imp == mod || strings.HasPrefix(imp, mod+"/")) && !slices.Contains(ok, imp) {
				t.Errorf("sandbox/%s imports %s; want only %v", dir, imp, ok)
			}
		}
	}
}
