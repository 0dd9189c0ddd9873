package hostfile

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// hostFile is a file outside the destination's directory that a sandbox would like airlock
// to overwrite.
func hostFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(p, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func assertUntouched(t *testing.T, p string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "host secret\n" {
		t.Errorf("host file %s: %q, %v; want it untouched", p, b, err)
	}
}

func assertReport(t *testing.T, p, want string) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want a regular 0600 file", p, fi.Mode())
	}
	if b, _ := os.ReadFile(p); string(b) != want {
		t.Errorf("%s holds %q, want %q", p, b, want)
	}
}

// TestPlantedEntries: whatever a sandbox leaves at the destination's name after Open, the
// write replaces that entry and never writes through it.
func TestPlantedEntries(t *testing.T) {
	cases := []struct {
		name  string
		plant func(t *testing.T, dst, host string)
	}{
		{"symlink to a host file", func(t *testing.T, dst, host string) { must(t, os.Symlink(host, dst)) }},
		{"dangling symlink", func(t *testing.T, dst, host string) {
			must(t, os.Symlink(filepath.Join(filepath.Dir(host), "new-root-file"), dst))
		}},
		{"symlink to a host directory", func(t *testing.T, dst, host string) { must(t, os.Symlink(filepath.Dir(host), dst)) }},
		{"hard link to a host file", func(t *testing.T, dst, host string) { must(t, os.Link(host, dst)) }},
		{"FIFO", func(t *testing.T, dst, host string) { must(t, unix.Mkfifo(dst, 0o666)) }},
		{"symlink to /dev/stdin", func(t *testing.T, dst, host string) { must(t, os.Symlink("/proc/self/fd/0", dst)) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			host := hostFile(t)
			// The hard link needs the same file system: put the workspace beside the host file.
			ws := filepath.Join(filepath.Dir(host), "ws")
			must(t, os.Mkdir(ws, 0o777))
			dst := filepath.Join(ws, "report.json")
			d, err := Open(dst)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			tc.plant(t, dst, host)
			if err := d.WriteFile([]byte("report\n")); err != nil {
				t.Fatalf("WriteFile: %v", err)
			}
			assertReport(t, dst, "report\n")
			assertUntouched(t, host)
			if _, err := os.Lstat(filepath.Join(filepath.Dir(host), "new-root-file")); err == nil {
				t.Error("a dangling link's target was created")
			}
			if ents, _ := os.ReadDir(filepath.Dir(host)); len(ents) != 2 {
				t.Errorf("the host directory holds %d entries, want shadow and ws only", len(ents))
			}
		})
	}
}

// TestLinkedParent: the destination's directory is the one resolved by Open; replacing it
// with a link (or renaming it) afterwards does not move the write.
func TestLinkedParent(t *testing.T) {
	host := hostFile(t)
	ws := t.TempDir()
	out := filepath.Join(ws, "out")
	must(t, os.Mkdir(out, 0o777))
	d, err := Open(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	must(t, os.Rename(out, filepath.Join(ws, "moved")))
	must(t, os.Symlink(filepath.Dir(host), out))
	if err := d.WriteFile([]byte("report\n")); err != nil {
		t.Fatal(err)
	}
	assertReport(t, filepath.Join(ws, "moved", "report.json"), "report\n")
	if _, err := os.Lstat(filepath.Join(filepath.Dir(host), "report.json")); err == nil {
		t.Error("the report went through the linked parent")
	}
	assertUntouched(t, host)

	// The directory removed: the write fails and says so; nothing is written elsewhere.
	gone := filepath.Join(ws, "gone")
	must(t, os.Mkdir(gone, 0o777))
	d2, err := Open(filepath.Join(gone, "r.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	must(t, os.Remove(gone))
	must(t, os.Symlink(filepath.Dir(host), gone))
	if err := d2.WriteFile([]byte("x")); err == nil || !strings.Contains(err.Error(), gone) {
		t.Errorf("WriteFile into a removed directory: %v, want an error naming it", err)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(host), "r.json")); err == nil {
		t.Error("the report went through the link that replaced its directory")
	}
}

// TestDirectoryAtDestination: a directory at the name is refused by Open, and when it
// appears later the write fails instead of going inside it.
func TestDirectoryAtDestination(t *testing.T) {
	ws := t.TempDir()
	must(t, os.Mkdir(filepath.Join(ws, "d"), 0o777))
	if _, err := Open(filepath.Join(ws, "d")); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("Open of a directory: %v", err)
	}
	d, err := Open(filepath.Join(ws, "r"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	must(t, os.Mkdir(filepath.Join(ws, "r"), 0o777))
	if err := d.WriteFile([]byte("x")); err == nil {
		t.Error("WriteFile over a directory succeeded")
	}
	if ents, _ := os.ReadDir(filepath.Join(ws, "r")); len(ents) != 0 {
		t.Errorf("the write went into the planted directory: %v", ents)
	}
	if ents, _ := os.ReadDir(ws); len(ents) != 2 {
		t.Errorf("temporary files left behind: %v", ents)
	}
}

func TestOpenRefuses(t *testing.T) {
	ws := t.TempDir()
	for _, p := range []string{"", filepath.Join(ws, "missing", "r.json"), ws + "/", filepath.Join(ws, "..")} {
		if d, err := Open(p); err == nil {
			d.Close()
			t.Errorf("Open(%q) succeeded", p)
		}
	}
	if os.Geteuid() != 0 {
		return
	}
	ro := t.TempDir()
	must(t, unix.Mount("tmpfs", ro, "tmpfs", unix.MS_RDONLY, "size=64k"))
	defer unix.Unmount(ro, unix.MNT_DETACH)
	if _, err := Open(filepath.Join(ro, "r.json")); err == nil {
		t.Error("Open on a read-only file system succeeded")
	}
}

// TestRace: a sandbox swaps the destination (and the temporary names it can guess) among a
// link to a host file, a FIFO, a directory and a plain file while airlock writes, over and
// over. Each write either lands as a regular file with the full content or fails; the host
// file is never touched and nothing is created outside the directory.
func TestRace(t *testing.T) {
	host := hostFile(t)
	ws := filepath.Join(filepath.Dir(host), "ws")
	must(t, os.Mkdir(ws, 0o777))
	dst := filepath.Join(ws, "report.json")
	d, err := Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			tmp := dst + ".swap"
			switch i % 4 {
			case 0:
				_ = os.Symlink(host, tmp)
			case 1:
				_ = unix.Mkfifo(tmp, 0o666)
			case 2:
				_ = os.Link(host, tmp)
			case 3:
				_ = os.Symlink(filepath.Dir(host), tmp)
			}
			_ = os.Rename(tmp, dst)
			// Also plant links under every temporary name present.
			ents, _ := os.ReadDir(ws)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".airlock-") {
					p := filepath.Join(ws, e.Name())
					_ = os.Remove(p)
					_ = os.Symlink(host, p)
				}
			}
		}
	}()
	content := bytes.Repeat([]byte("report line\n"), 1000)
	ok := 0
	for i := 0; i < 300; i++ {
		if err := d.WriteFile(content); err == nil {
			ok++
		}
	}
	stop.Store(true)
	wg.Wait()
	assertUntouched(t, host)
	if ents, _ := os.ReadDir(filepath.Dir(host)); len(ents) != 2 {
		t.Errorf("the host directory holds %d entries, want shadow and ws only", len(ents))
	}
	if ok == 0 {
		t.Error("no write succeeded during the race")
	}
	// Quiet again: the last write lands whole.
	if err := d.WriteFile(content); err != nil {
		t.Fatal(err)
	}
	assertReport(t, dst, string(content))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
