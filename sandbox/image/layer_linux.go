package image

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A layer's entries come from an image nobody vouched for: a name that is absolute or
// climbs with "..", a write through a link (a directory replaced by a symbolic link, then
// a file beneath it), a hard link to anything outside the root, device nodes. applier
// writes beneath root only: every parent is opened with openat2 (RESOLVE_BENEATH,
// RESOLVE_NO_SYMLINKS) from the root's descriptor, and the last component with *at calls
// that do not follow links. Setuid and setgid bits are dropped, owners are not kept (all is
// root's, read through the sandbox's user namespace as nobody), devices are not created.

// whiteoutPrefix marks a deleted path in a layer; opaqueWhiteout empties its directory of
// what lower layers put there (OCI image spec, "Whiteouts").
const (
	whiteoutPrefix = ".wh."
	opaqueWhiteout = ".wh..wh..opq"
)

// applier writes layers into one root directory.
type applier struct {
	root    *os.File
	rootDir string
	limit   int64 // bytes of file content left
	files   int64 // entries left
	skipped int   // device nodes and FIFOs not created
}

func newApplier(dir string, limit, files int64) (*applier, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	return &applier{root: f, rootDir: dir, limit: limit, files: files}, nil
}

func (a *applier) close() { a.root.Close() }

// cleanName checks a tar entry's name: relative, no "..", not empty once cleaned. "./x"
// and "x/" are fine.
func cleanName(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("entry %q: absolute path", name)
	}
	for _, c := range strings.Split(name, "/") {
		if c == ".." {
			return "", fmt.Errorf("entry %q: climbs out with \"..\"", name)
		}
	}
	if strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("entry %q: NUL in name", name)
	}
	return path.Clean(name), nil
}

// parent opens the directory holding rel, creating missing directories (0755): no
// component may be a link or leave the root.
func (a *applier) parent(rel string) (*os.File, string, error) {
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	fd, err := a.openDir(dir, true)
	if err != nil {
		return nil, "", err
	}
	return fd, base, nil
}

// openDir opens rel beneath the root as a directory, without following links.
func (a *applier) openDir(rel string, create bool) (*os.File, error) {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(int(a.root.Fd()), rel, how)
	if errors.Is(err, unix.ENOENT) && create && rel != "." {
		p, base, perr := a.parent(rel)
		if perr != nil {
			return nil, perr
		}
		err = unix.Mkdirat(int(p.Fd()), base, 0o755)
		p.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("create %s: %w", rel, err)
		}
		fd, err = unix.Openat2(int(a.root.Fd()), rel, how)
	}
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("%s: reaches through a link or a non-directory: refused", rel)
		}
		return nil, fmt.Errorf("open %s: %w", rel, err)
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// apply writes one layer (an uncompressed tar stream).
func (a *applier) apply(r io.Reader) error {
	tr := tar.NewReader(r)
	made := map[string]bool{} // paths this layer wrote: an opaque whiteout keeps them
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
		if a.files--; a.files < 0 {
			return errors.New("too many entries: refused")
		}
		name, err := cleanName(h.Name)
		if err != nil {
			return err
		}
		if name == "." {
			continue // the root itself: its mode stays 0755
		}
		base := path.Base(name)
		if strings.HasPrefix(base, whiteoutPrefix) {
			if err := a.whiteout(name, made); err != nil {
				return err
			}
			continue
		}
		if err := a.entry(name, h, tr); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		made[name] = true
	}
}

// whiteout removes what a whiteout entry names from the lower layers.
func (a *applier) whiteout(name string, made map[string]bool) error {
	dir, base := path.Split(name)
	dir = path.Clean(dir)
	if base == opaqueWhiteout {
		d, err := a.openDir(dir, true)
		if err != nil {
			return err
		}
		defer d.Close()
		entries, err := readDirAt(d)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if !made[path.Join(dir, e)] {
				if err := a.remove(d, e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if strings.HasPrefix(base, whiteoutPrefix+whiteoutPrefix) {
		return nil // another marker of the format (.wh..wh.plnk ...): nothing to write
	}
	target := strings.TrimPrefix(base, whiteoutPrefix)
	if target == "" || target == "." || target == ".." {
		return fmt.Errorf("entry %q: bad whiteout", name)
	}
	d, err := a.openDir(dir, false)
	if errors.Is(err, os.ErrNotExist) {
		return nil // nothing below to delete
	}
	if err != nil {
		return err
	}
	defer d.Close()
	return a.remove(d, target)
}

// readDirAt lists a directory opened with O_PATH.
func readDirAt(d *os.File) ([]string, error) {
	f, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", d.Fd()))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// remove deletes name (a tree, if a directory) from the directory d. The tree is beneath
// the root and has no links followed: os.RemoveAll works with *at calls and O_NOFOLLOW.
func (a *applier) remove(d *os.File, name string) error {
	err := unix.Unlinkat(int(d.Fd()), name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	dirPath, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", d.Fd()))
	if err != nil {
		return err
	}
	if rel, err := filepath.Rel(a.rootDir, dirPath); err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("remove %s: outside the root", name)
	}
	return os.RemoveAll(filepath.Join(dirPath, name))
}

// entry writes one tar entry at name.
func (a *applier) entry(name string, h *tar.Header, r io.Reader) error {
	mode := uint32(h.Mode) & 0o1777 // no setuid, no setgid
	switch h.Typeflag {
	case tar.TypeDir:
		d, base, err := a.parent(name)
		if err != nil {
			return err
		}
		defer d.Close()
		var st unix.Stat_t
		if unix.Fstatat(int(d.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := a.remove(d, base); err != nil {
				return err
			}
		}
		if err := unix.Mkdirat(int(d.Fd()), base, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		return unix.Fchmodat(int(d.Fd()), base, mode, 0)
	case tar.TypeReg: // archive/tar reads the old '\x00' as TypeReg
		return a.file(name, h, mode, r)
	case tar.TypeSymlink:
		return a.symlink(name, h.Linkname)
	case tar.TypeLink:
		return a.hardlink(name, h.Linkname)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		a.skipped++ // a device of the image's would reach the host's hardware: not created
		return nil
	default:
		return fmt.Errorf("entry type %q not supported", h.Typeflag)
	}
}

// replace opens name's parent and removes whatever is at name already.
func (a *applier) replace(name string) (*os.File, string, error) {
	d, base, err := a.parent(name)
	if err != nil {
		return nil, "", err
	}
	if err := a.remove(d, base); err != nil {
		d.Close()
		return nil, "", err
	}
	return d, base, nil
}

func (a *applier) file(name string, h *tar.Header, mode uint32, r io.Reader) error {
	if h.Size > a.limit {
		return errors.New("the image is larger than the unpack limit: refused")
	}
	a.limit -= h.Size
	d, base, err := a.replace(name)
	if err != nil {
		return err
	}
	defer d.Close()
	fd, err := unix.Openat(int(d.Fd()), base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	_, err = io.CopyN(f, r, h.Size)
	if err == nil {
		err = f.Chmod(os.FileMode(mode & 0o777))
	}
	if err == nil && mode&0o1000 != 0 {
		err = unix.Fchmod(fd, mode)
	}
	if err == nil && !h.ModTime.IsZero() {
		ts := []unix.Timespec{unix.NsecToTimespec(h.ModTime.UnixNano()), unix.NsecToTimespec(h.ModTime.UnixNano())}
		err = unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// symlink creates a link. Its target is read inside the sandbox, whose root is this one:
// an absolute target is the root's; a relative one that climbs above the root is refused.
func (a *applier) symlink(name, target string) error {
	if target == "" || strings.ContainsRune(target, 0) {
		return errors.New("symbolic link with an empty target")
	}
	if !path.IsAbs(target) {
		if j := path.Join(path.Dir(name), target); j == ".." || strings.HasPrefix(j, "../") {
			return fmt.Errorf("symbolic link to %q leaves the root: refused", target)
		}
	}
	d, base, err := a.replace(name)
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.Symlinkat(target, int(d.Fd()), base)
}

// hardlink links name to another entry of the image, found beneath the root without
// following links.
func (a *applier) hardlink(name, target string) error {
	t, err := cleanName(target)
	if err != nil {
		return fmt.Errorf("hard link: %w", err)
	}
	if t == "." {
		return errors.New("hard link to the root: refused")
	}
	td, tbase, err := a.parent(t)
	if err != nil {
		return fmt.Errorf("hard link target: %w", err)
	}
	defer td.Close()
	var st unix.Stat_t
	if err := unix.Fstatat(int(td.Fd()), tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("hard link target %s: %w", t, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("hard link to directory %s: refused", t)
	}
	if t == name {
		return nil
	}
	d, base, err := a.replace(name)
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.Linkat(int(td.Fd()), tbase, int(d.Fd()), base, 0)
}
