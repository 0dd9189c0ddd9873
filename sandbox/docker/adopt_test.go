package docker

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOwnerOfAdopted: a container taken over by a live airlock is that airlock's, not its
// dead creator's (its label cannot change), so RemoveLeftovers spares it; a file of
// another sandbox, or an id that could reach outside the state directory, changes nothing.
func TestOwnerOfAdopted(t *testing.T) {
	state := t.TempDir()
	b := testBackend(t, Options{StateDir: state})
	dead := "somehost/999999999/5"
	labels := map[string]string{OwnerLabel: dead}
	if got := b.ownerOf("sbx-a", labels); got != dead {
		t.Errorf("not taken over: %q, want the label's %q", got, dead)
	}
	if err := os.MkdirAll(filepath.Join(state, "sbx-a"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "sbx-a", adoptedFile), []byte(owner()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := b.ownerOf("sbx-a", labels); got != owner() || ownerGone(got) {
		t.Errorf("taken over: %q (gone %v), want this live process %q", got, ownerGone(got), owner())
	}
	for _, id := range []string{"sbx-b", "../sbx-a", ""} {
		if got := b.ownerOf(id, labels); got != dead {
			t.Errorf("ownerOf(%q) = %q, want the label's", id, got)
		}
	}
}
