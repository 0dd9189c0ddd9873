package native

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
)

// TestPatchLimits: a patch is built from files the sandbox wrote, so what one file and the
// whole patch may bring is bounded. A file over the per-file bound is left out and named;
// past the total, every further file is left out and named; the patch is never refused.
func TestPatchLimits(t *testing.T) {
	defer func(l PostRunLimits) { postRun = l }(postRun)
	postRun.FileBytes, postRun.PatchBytes = 1000, 2500
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
	if !errors.Is(err, sandbox.ErrPatchIncomplete) || !strings.Contains(err.Error(), "big") {
		t.Fatalf("patchOf with a file over the bound: %v, want ErrPatchIncomplete naming big", err)
	}
	if !strings.Contains(string(p), "# airlock: big left out") || !strings.Contains(string(p), "+++ b/a") {
		t.Errorf("patch does not carry a and name big:\n%s", p)
	}
	write("c", 800)
	write("d", 800)
	p, err = patchOf(upper, lower)
	if !errors.Is(err, sandbox.ErrPatchIncomplete) || !strings.Contains(err.Error(), "d") {
		t.Fatalf("patchOf over the total: %v, want the files past it named", err)
	}
	if len(p) > 2500+500 || !strings.Contains(string(p), "# airlock: d left out: the patch reached its") {
		t.Errorf("patch over the total (%d bytes) does not stop and say so:\n%s", len(p), p)
	}
}

// TestListingBounds: the change listing stops at its bounds, keeps what it found, and says
// why it is incomplete.
func TestListingBounds(t *testing.T) {
	defer func(l PostRunLimits) { postRun = l }(postRun)
	upper, lower := t.TempDir(), t.TempDir()
	for _, n := range []string{"a", "b", "c", "e"} {
		if err := os.WriteFile(filepath.Join(upper, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deep := upper
	for range 10 {
		deep = filepath.Join(deep, "d")
		if err := os.Mkdir(deep, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(deep, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l := changesOf(upper, lower)
	if l.Incomplete() != "" || len(l.changes) != 4+1+1 {
		t.Fatalf("unbounded listing: %d changes, incomplete %q", len(l.changes), l.Incomplete())
	}
	postRun.Changes = 2
	if l := changesOf(upper, lower); len(l.changes) != 2 || !strings.Contains(l.Incomplete(), "stopped at 2 changes") {
		t.Errorf("listing over Changes: %v, %q", l.changes, l.Incomplete())
	}
	postRun = DefaultPostRunLimits
	postRun.Depth = 3
	l = changesOf(upper, lower)
	if !strings.Contains(l.Incomplete(), "d/d/d/ not listed: deeper than 3 levels") || len(l.changes) != 4+1 {
		t.Errorf("listing over Depth: %v, %q", l.changes, l.Incomplete())
	}
	postRun = DefaultPostRunLimits
	postRun.Time = time.Nanosecond
	time.Sleep(time.Millisecond)
	if l := changesOf(upper, lower); !strings.Contains(l.Incomplete(), "stopped after") {
		t.Errorf("listing over Time: %q", l.Incomplete())
	}
}
