package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
)

// testImageEnv names the image the tests that start containers run; by default the one
// e2e/docker/build-image.sh builds (scripts/test.sh builds it before the unit tests).
const testImageEnv = "AIRLOCK_TEST_DOCKER_IMAGE"

// liveBackend is a backend of mode netns on this machine's Docker engine, or a skip that
// says what is missing (root, the daemon, the image).
func liveBackend(t *testing.T) *Backend {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: sandbox containers need root (mode netns)")
	}
	img := os.Getenv(testImageEnv)
	if img == "" {
		img = "airlock-sandbox-test:latest"
	}
	b, err := New(Options{Image: img, Mode: ModeNetNS, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.cli.Ping(ctx); err != nil {
		t.Skipf("skipped: the Docker daemon is not reachable: %v", err)
	}
	if _, err := b.cli.ImageInspect(ctx, img); err != nil {
		t.Skipf("skipped: image %s is missing (sh e2e/docker/build-image.sh, or set %s): %v", img, testImageEnv, err)
	}
	return b
}

// TestCreateWithLiveIDLeavesItAlone: a second Create with the id of a live sandbox (of
// another session, or a client's spec.id) fails "already exists" and its cleanup leaves
// the live sandbox as it was: its state directory, the owner file of its adopter, its
// devpts and its uid range stay, it still runs commands, and the leftover sweep keeps it;
// a Create of another airlock (another state directory) fails on the container's name and
// removes nothing of it either.
// Before the fix the failed Create removed all of that, the sweep then freed its uid range
// for another sandbox and removed an adopted sandbox as its dead creator's.
func TestCreateWithLiveIDLeavesItAlone(t *testing.T) {
	for _, adopted := range []bool{false, true} {
		t.Run(map[bool]string{false: "created", true: "adopted"}[adopted], func(t *testing.T) {
			b := liveBackend(t)
			ctx := context.Background()
			id := fmt.Sprintf("coll-%d-%t", os.Getpid(), adopted)
			me := b.owner
			if adopted {
				h, _ := os.Hostname()
				b.owner = h + "/999999999/1" // its creator, dead
			}
			live, err := sandbox.New(ctx, sandbox.Options{ID: id, Backend: b})
			b.owner = me
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = live.Close(context.Background()) })
			dir := filepath.Join(b.opts.StateDir, id)
			ownerFile := filepath.Join(dir, adoptedFile)
			if adopted { // taken over by this process, as takeOver records it
				if err := os.WriteFile(ownerFile, []byte(me), 0o600); err != nil {
					t.Fatal(err)
				}
				if n, err := b.RemoveLeftovers(ctx); n != 0 || err != nil {
					t.Fatalf("before the collision the sweep removed %d (%v), want 0", n, err)
				}
			}
			slot := uidSlot(t, id, b.opts.StateDir)

			_, err = sandbox.New(ctx, sandbox.Options{ID: id, Backend: b})
			if !errors.Is(err, sandbox.ErrExists) {
				t.Errorf("second create with id %s: %v, want sandbox.ErrExists", id, err)
			}

			if _, err := os.Stat(dir); err != nil {
				t.Errorf("the live sandbox's state directory: %v", err)
			}
			if adopted {
				if got, err := os.ReadFile(ownerFile); string(got) != me {
					t.Errorf("owner file of the adopted sandbox: %q (%v), want %q", got, err, me)
				}
			}
			if !mounted(t, filepath.Join(dir, "pts")) {
				t.Errorf("the live sandbox's devpts %s is no longer mounted", filepath.Join(dir, "pts"))
			}
			// The sweep as a minute later: the uid slot is old enough to be freed if its
			// sandbox looked gone.
			old := time.Now().Add(-2 * time.Minute)
			if err := os.Chtimes(slot, old, old); err != nil {
				t.Fatal(err)
			}
			if n, err := b.RemoveLeftovers(ctx); n != 0 || err != nil {
				t.Errorf("the sweep after the collision removed %d (%v), want 0", n, err)
			}
			if _, err := os.Stat(slot); err != nil {
				t.Errorf("the live sandbox's uid slot: %v", err)
			}
			// Another airlock with its own state directory: the container's name collides.
			other, err := New(Options{Image: b.opts.Image, Mode: ModeNetNS, StateDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = other.Close() })
			if _, err := sandbox.New(ctx, sandbox.Options{ID: id, Backend: other}); !errors.Is(err, sandbox.ErrExists) {
				t.Errorf("create with id %s beside another state directory: %v, want sandbox.ErrExists", id, err)
			}
			res, err := live.Run(ctx, sandbox.Command{Args: []string{"echo", "alive"}})
			if err != nil || string(res.Stdout) != "alive\n" {
				t.Errorf("the live sandbox after the collision: %q, %v; want alive", res.Stdout, err)
			}
		})
	}
}

// uidSlot is the path of the uid slot reserved for sandbox id under state.
func uidSlot(t *testing.T, id, state string) string {
	t.Helper()
	ents, err := os.ReadDir(sandbox.SlotDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		p := filepath.Join(sandbox.SlotDir, e.Name())
		if c, _ := os.ReadFile(p); string(c) == id+"\n"+filepath.Clean(state)+"\n" {
			return p
		}
	}
	t.Fatalf("no uid slot for sandbox %s in %s", id, sandbox.SlotDir)
	return ""
}

// mounted reports whether path is a mount point of this process's mount namespace.
func mounted(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}
