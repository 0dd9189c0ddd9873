package sandbox

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
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
		lfi, inLower := lstatBeneath(lower, rel)
		if isWhiteout(info) {
			if inLower {
				out = append(out, deletedUnder(lower, rel, lfi)...)
			}
			return nil
		}
		if d.IsDir() {
			switch {
			case !inLower:
				out = append(out, Change{Path: rel + "/", Kind: "added"})
			case !lfi.IsDir():
				// A file or link of the host replaced by a directory.
				out = append(out, Change{Path: rel, Kind: "deleted"}, Change{Path: rel + "/", Kind: "added"})
			case isOpaque(path):
				out = append(out, opaqueDeletions(upper, lower, rel)...)
			}
			return nil
		}
		switch {
		case !inLower:
			out = append(out, Change{Path: rel, Kind: "added"})
		case lfi.IsDir():
			// A directory of the host replaced by a file or link.
			out = append(out, deletedUnder(lower, rel, lfi)...)
			out = append(out, Change{Path: rel, Kind: "added"})
		case !sameFile(upper, lower, rel, info, lfi):
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

// lstatBeneath is Lstat of rel under the host workspace root, false when rel is not
// there or one of its parents is a symlink: the sandbox names the paths (its upper
// directory mirrors them), and a host symlink on the way must not take the listing out of
// the workspace.
func lstatBeneath(root, rel string) (fs.FileInfo, bool) {
	// The host side does not change under the sandbox, so checking the way once and then
	// using the path is enough.
	dir := filepath.Dir(rel)
	if dir == "." {
		dir = ""
	}
	fd, err := openDirBeneath(root, dir)
	if err != nil {
		return nil, false
	}
	unix.Close(fd)
	fi, err := os.Lstat(filepath.Join(root, rel))
	return fi, err == nil
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

// sameFile says whether the upper and lower versions of rel hold the same thing. Both are
// read as patchOf reads them (no symlink followed, only regular files opened), so a FIFO
// or a link the sandbox planted cannot block or redirect the comparison; what cannot be
// read is reported as changed.
func sameFile(upper, lower, rel string, ufi, lfi fs.FileInfo) bool {
	if ufi.Mode() != lfi.Mode() || ufi.Size() != lfi.Size() {
		return false
	}
	u, err1 := readEntry(upper, rel)
	l, err2 := readEntry(lower, rel)
	return err1 == nil && err2 == nil && u.mode == l.mode && bytes.Equal(u.data, l.data)
}
