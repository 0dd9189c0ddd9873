package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPatchLimits: a patch is built in memory from what the sandbox wrote, so what one file
// and all files may bring is bounded. A file over the per-file bound is left out and named;
// more than the total is refused outright.
func TestPatchLimits(t *testing.T) {
	defer func(f, total int) { maxPatchFile, maxPatchTotal = f, total }(maxPatchFile, maxPatchTotal)
	maxPatchFile, maxPatchTotal = 1000, 2500
	upper, lower := t.TempDir(), t.TempDir()
	write := func(name string, n int) {
		if err := os.WriteFile(filepath.Join(upper, name), []byte(strings.Repeat("x\n", n/2)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("big", 1200)
	write("a", 800)
	write("b", 800)
	p, err := patchOf(upper, lower)
	if !errors.Is(err, ErrPatchIncomplete) || !strings.Contains(err.Error(), "big") {
		t.Fatalf("patchOf with a file over the bound: %v, want ErrPatchIncomplete naming big", err)
	}
	if !strings.Contains(string(p), "# airlock: big left out") || !strings.Contains(string(p), "+++ b/a") {
		t.Errorf("patch does not carry a and name big:\n%s", p)
	}
	write("c", 800)
	write("d", 800)
	if _, err := patchOf(upper, lower); err == nil || !strings.Contains(err.Error(), "a patch carries") {
		t.Errorf("patchOf over the total: %v, want it refused", err)
	}
}
