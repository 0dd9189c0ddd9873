package sandbox

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// Change is one path changed in a copy-on-write workspace.
type Change struct {
	Path string `json:"path"` // relative to the workspace
	Kind string `json:"kind"` // "added", "modified" or "deleted"
}

// changesOf compares an overlay upper directory with the lower (host) workspace.
func changesOf(upper, lower string) ([]Change, error) {
	var out []Change
	err := filepath.WalkDir(upper, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(upper, path)
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		lowerPath := filepath.Join(lower, rel)
		lfi, lerr := os.Lstat(lowerPath)
		inLower := lerr == nil
		if isWhiteout(info) {
			if inLower {
				out = append(out, deletedUnder(lower, rel, lfi)...)
			}
			return nil
		}
		if d.IsDir() {
			if isOpaque(path) && inLower && lfi.IsDir() {
				out = append(out, opaqueDeletions(upper, lower, rel)...)
			}
			if !inLower {
				out = append(out, Change{Path: rel + "/", Kind: "added"})
			}
			return nil
		}
		switch {
		case !inLower:
			out = append(out, Change{Path: rel, Kind: "added"})
		case !sameFile(path, info, lowerPath, lfi):
			out = append(out, Change{Path: rel, Kind: "modified"})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list workspace changes: %w", err)
	}
	slices.SortFunc(out, func(a, b Change) int { return cmpString(a.Path, b.Path) })
	return out, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func isWhiteout(fi fs.FileInfo) bool {
	if fi.Mode()&fs.ModeCharDevice == 0 {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
}

func isOpaque(dir string) bool {
	buf := make([]byte, 4)
	for _, name := range []string{"trusted.overlay.opaque", "user.overlay.opaque"} {
		if n, err := unix.Lgetxattr(dir, name, buf); err == nil && n > 0 && buf[0] == 'y' {
			return true
		}
	}
	return false
}

// deletedUnder lists a deleted lower path (and, for a directory, its files).
func deletedUnder(lower, rel string, fi fs.FileInfo) []Change {
	if !fi.IsDir() {
		return []Change{{Path: rel, Kind: "deleted"}}
	}
	var out []Change
	_ = filepath.WalkDir(filepath.Join(lower, rel), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			r, _ := filepath.Rel(lower, path)
			out = append(out, Change{Path: r, Kind: "deleted"})
		}
		return nil
	})
	return out
}

// opaqueDeletions lists files of a lower directory hidden by an opaque upper directory.
func opaqueDeletions(upper, lower, rel string) []Change {
	var out []Change
	entries, _ := os.ReadDir(filepath.Join(lower, rel))
	for _, e := range entries {
		r := filepath.Join(rel, e.Name())
		if _, err := os.Lstat(filepath.Join(upper, r)); err == nil {
			continue
		}
		if fi, err := e.Info(); err == nil {
			out = append(out, deletedUnder(lower, r, fi)...)
		}
	}
	return out
}

func sameFile(a string, afi fs.FileInfo, b string, bfi fs.FileInfo) bool {
	if afi.Mode() != bfi.Mode() || afi.Size() != bfi.Size() {
		return false
	}
	if afi.Mode()&fs.ModeSymlink != 0 {
		ta, _ := os.Readlink(a)
		tb, _ := os.Readlink(b)
		return ta == tb
	}
	da, err1 := os.ReadFile(a)
	db, err2 := os.ReadFile(b)
	return err1 == nil && err2 == nil && bytes.Equal(da, db)
}

// patchOf renders the changes as one unified diff (a/ is the host, b/ the sandbox's view),
// using the host's diff(1).
func patchOf(upper, lower string) ([]byte, error) {
	changes, err := changesOf(upper, lower)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for _, c := range changes {
		if c.Path[len(c.Path)-1] == '/' {
			continue
		}
		from, to := filepath.Join(lower, c.Path), filepath.Join(upper, c.Path)
		switch c.Kind {
		case "added":
			from = os.DevNull
		case "deleted":
			to = os.DevNull
		}
		cmd := exec.Command("diff", "-u", "--label", "a/"+c.Path, "--label", "b/"+c.Path, from, to)
		b, err := cmd.Output()
		var ee *exec.ExitError
		if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
			return nil, fmt.Errorf("diff %s: %w", c.Path, err)
		}
		out.Write(b)
	}
	return out.Bytes(), nil
}
