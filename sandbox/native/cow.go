package native

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
	"golang.org/x/sys/unix"
)

// PostRunLimits bound what airlock does, outside the sandbox's own limits, with what a
// copy-on-write sandbox left behind: listing its changes and making its patch. Past a bound
// the work stops and says what it left out; it never fails as a whole.
type PostRunLimits struct {
	Time       time.Duration // the listing, and the patch, each
	Changes    int           // changes listed
	NameBytes  int           // bytes of the listed path names together
	Depth      int           // directory levels walked
	FileBytes  int           // bytes of one file a patch carries (either side)
	PatchBytes int           // bytes of the whole patch
	DiffSteps  int           // work of one file's line diff before it falls back to a whole-file hunk
}

// DefaultPostRunLimits are the bounds airlock applies.
var DefaultPostRunLimits = PostRunLimits{
	Time:       2 * time.Minute,
	Changes:    100_000,
	NameBytes:  32 << 20,
	Depth:      4096,
	FileBytes:  16 << 20,
	PatchBytes: 256 << 20,
	DiffSteps:  20_000_000,
}

// postRun are the bounds in force (tests lower them).
var postRun = DefaultPostRunLimits

// listing is the result of comparing an overlay upper directory with the host workspace:
// every change found and, when the walk could not see everything, why (named paths).
type listing struct {
	changes    []sandbox.Change
	incomplete []string
	names      int
	deadline   time.Time
	stopped    string // set when a bound ended the walk
}

// Incomplete says why the listing may lack changes; "" when it is complete.
func (l *listing) Incomplete() string {
	var parts []string
	if l.stopped != "" {
		parts = append(parts, l.stopped)
	}
	const show = 20
	for i, s := range l.incomplete {
		if i == show {
			parts = append(parts, fmt.Sprintf("and %d more", len(l.incomplete)-show))
			break
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

func (l *listing) add(path, kind string) bool {
	if l.stopped != "" {
		return false
	}
	if len(l.changes) >= postRun.Changes {
		l.stopped = fmt.Sprintf("the listing stopped at %d changes", postRun.Changes)
		return false
	}
	if l.names += len(path); l.names > postRun.NameBytes {
		l.stopped = fmt.Sprintf("the listing stopped at %d MiB of path names", postRun.NameBytes>>20)
		return false
	}
	l.changes = append(l.changes, sandbox.Change{Path: path, Kind: kind})
	return true
}

// miss records a part of the tree the walk could not see.
func (l *listing) miss(rel string, err error) {
	if len(l.incomplete) < 1000 {
		l.incomplete = append(l.incomplete, fmt.Sprintf("%s not listed: %v", quotePath(rel), err))
	}
}

func (l *listing) expired() bool {
	if l.stopped == "" && time.Now().After(l.deadline) {
		l.stopped = fmt.Sprintf("the listing stopped after %s", postRun.Time)
	}
	return l.stopped != ""
}

// changesOf compares an overlay upper directory with the lower (host) workspace. The
// sandbox wrote the upper directory, so nothing there is trusted: the walk goes one
// directory descriptor per level (openat with O_NOFOLLOW), so that no symlink is followed on
// either side and no depth or name length makes a path too long; files are compared by
// descriptor, only regular files opened. It is bounded by postRun and never fails as a
// whole: what it could not see is in the listing's Incomplete.
func changesOf(upper, lower string) *listing {
	l := &listing{deadline: time.Now().Add(postRun.Time)}
	u, err := openDir(unix.AT_FDCWD, upper)
	if err != nil {
		l.miss(".", err)
		return l
	}
	defer unix.Close(u)
	lw, err := openDir(unix.AT_FDCWD, lower)
	if err != nil {
		l.miss(".", fmt.Errorf("host workspace: %w", err))
		return l
	}
	defer unix.Close(lw)
	l.walk(u, lw, "", 1)
	slices.SortFunc(l.changes, func(a, b sandbox.Change) int { return strings.Compare(a.Path, b.Path) })
	return l
}

// listChanges is changesOf as Instance.Changes returns it, with changes of protected paths
// (hostRun) marked.
func listChanges(upper, lower string, protected []string) ([]sandbox.Change, error) {
	l := changesOf(upper, lower)
	for i := range l.changes {
		l.changes[i].Protected = hostRun(l.changes[i].Path, protected) != ""
	}
	if why := l.Incomplete(); why != "" {
		return l.changes, fmt.Errorf("%w: %s", sandbox.ErrChangesIncomplete, why)
	}
	return l.changes, nil
}

// openDir opens name beneath dir as a directory for reading, not following a symlink.
func openDir(dir int, name string) (int, error) {
	return unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// readNames lists a directory's entries through a duplicate of fd (which stays open).
func readNames(fd int) ([]string, error) {
	d, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(d), "")
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	names, err := f.Readdirnames(-1)
	slices.Sort(names)
	return names, err
}

func join(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

// walk lists the changes under the upper directory u; lw is the same directory of the host
// workspace, -1 where the host has none. A directory's files come before its
// subdirectories, so that a deep or large subtree reaching a bound cannot hide a change
// beside it; a new directory is listed (as "dir/") at the top of a new subtree only.
func (l *listing) walk(u, lw int, rel string, depth int) {
	names, err := readNames(u)
	if err != nil {
		l.miss(rel+"/", err)
	}
	var dirs []string
	for _, name := range names {
		if l.expired() {
			return
		}
		path := join(rel, name)
		var ust, lst unix.Stat_t
		if err := unix.Fstatat(u, name, &ust, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			l.miss(path, err)
			continue
		}
		inLower := lw >= 0 && unix.Fstatat(lw, name, &lst, unix.AT_SYMLINK_NOFOLLOW) == nil
		lowerDir := inLower && lst.Mode&unix.S_IFMT == unix.S_IFDIR
		switch {
		case isWhiteout(&ust):
			if inLower {
				l.deleted(lw, name, path, &lst, depth)
			}
		case ust.Mode&unix.S_IFMT == unix.S_IFDIR:
			dirs = append(dirs, name)
		case !inLower:
			l.add(path, "added")
		case lowerDir:
			// A directory of the host replaced by a file or link.
			l.deleted(lw, name, path, &lst, depth)
			l.add(path, "added")
		case !l.sameFile(u, lw, name, &ust, &lst):
			l.add(path, "modified")
		}
	}
	for _, name := range dirs {
		if l.expired() {
			return
		}
		path := join(rel, name)
		var lst unix.Stat_t
		inLower := lw >= 0 && unix.Fstatat(lw, name, &lst, unix.AT_SYMLINK_NOFOLLOW) == nil
		lowerDir := inLower && lst.Mode&unix.S_IFMT == unix.S_IFDIR
		sub, err := openDir(u, name)
		if err != nil {
			l.miss(path+"/", err)
			continue
		}
		switch {
		case !inLower && lw >= 0:
			l.add(path+"/", "added")
		case inLower && !lowerDir:
			// A file or link of the host replaced by a directory.
			l.add(path, "deleted")
			l.add(path+"/", "added")
		}
		opaque := lowerDir && isOpaque(sub)
		if opaque {
			l.opaqueDeletions(sub, lw, name, path, depth)
		}
		l.descend(sub, lw, name, path, lowerDir && !opaque, depth)
		unix.Close(sub)
	}
}

// descend walks the upper subdirectory sub (name in the parent) with its host counterpart
// when withLower.
func (l *listing) descend(sub, lw int, name, path string, withLower bool, depth int) {
	if depth >= postRun.Depth {
		l.miss(path+"/", fmt.Errorf("deeper than %d levels", postRun.Depth))
		return
	}
	lsub := -1
	if withLower {
		fd, err := openDir(lw, name)
		if err != nil {
			l.miss(path+"/", fmt.Errorf("host side: %w", err))
		} else {
			lsub = fd
			defer unix.Close(fd)
		}
	}
	l.walk(sub, lsub, path, depth+1)
}

// deleted lists a deleted host path (name in the host directory lw) and, for a directory,
// every file under it.
func (l *listing) deleted(lw int, name, path string, st *unix.Stat_t, depth int) {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		l.add(path, "deleted")
		return
	}
	if depth >= postRun.Depth {
		l.miss(path+"/", fmt.Errorf("deeper than %d levels", postRun.Depth))
		return
	}
	sub, err := openDir(lw, name)
	if err != nil {
		l.miss(path+"/", fmt.Errorf("host side: %w", err))
		return
	}
	defer unix.Close(sub)
	names, err := readNames(sub)
	if err != nil {
		l.miss(path+"/", fmt.Errorf("host side: %w", err))
	}
	for _, n := range names {
		if l.expired() {
			return
		}
		var cst unix.Stat_t
		if err := unix.Fstatat(sub, n, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			l.miss(join(path, n), fmt.Errorf("host side: %w", err))
			continue
		}
		l.deleted(sub, n, join(path, n), &cst, depth+1)
	}
}

// opaqueDeletions lists the host files of a directory that an opaque upper directory usub
// hides (those usub does not have itself).
func (l *listing) opaqueDeletions(usub, lw int, name, path string, depth int) {
	lsub, err := openDir(lw, name)
	if err != nil {
		l.miss(path+"/", fmt.Errorf("host side: %w", err))
		return
	}
	defer unix.Close(lsub)
	names, err := readNames(lsub)
	if err != nil {
		l.miss(path+"/", fmt.Errorf("host side: %w", err))
	}
	for _, n := range names {
		if l.expired() {
			return
		}
		var st unix.Stat_t
		if unix.Fstatat(usub, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			continue
		}
		if err := unix.Fstatat(lsub, n, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			l.deleted(lsub, n, join(path, n), &st, depth+1)
		}
	}
}

func isWhiteout(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

func isOpaque(dirFD int) bool {
	buf := make([]byte, 4)
	for _, name := range []string{"trusted.overlay.opaque", "user.overlay.opaque"} {
		if n, err := unix.Fgetxattr(dirFD, name, buf); err == nil && n > 0 && buf[0] == 'y' {
			return true
		}
	}
	return false
}

// sameFile says whether the upper and host versions of name hold the same thing: the same
// type, mode and content (for links, target), compared by descriptor and in pieces, so that
// a FIFO or link the sandbox planted can neither block nor redirect it. What cannot be read
// counts as changed.
func (l *listing) sameFile(u, lw int, name string, ust, lst *unix.Stat_t) bool {
	if ust.Mode != lst.Mode || ust.Size != lst.Size {
		return false
	}
	switch ust.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		a, err1 := readLink(u, name)
		b, err2 := readLink(lw, name)
		return err1 == nil && err2 == nil && a == b
	case unix.S_IFREG:
	default:
		return false // a FIFO, socket or device is always reported
	}
	uf, err := openRegular(u, name)
	if err != nil {
		return false
	}
	defer uf.Close()
	lf, err := openRegular(lw, name)
	if err != nil {
		return false
	}
	defer lf.Close()
	a, b := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		if l.expired() {
			return false
		}
		n, err1 := io.ReadFull(uf, a)
		m, err2 := io.ReadFull(lf, b)
		if n != m || string(a[:n]) != string(b[:m]) {
			return false
		}
		if err1 != nil || err2 != nil {
			return (err1 == io.EOF || err1 == io.ErrUnexpectedEOF) && (err2 == io.EOF || err2 == io.ErrUnexpectedEOF)
		}
	}
}

func readLink(dir int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dir, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// openRegular opens name beneath dir for reading only if it is a regular file (never
// following a link, never blocking on a FIFO).
func openRegular(dir int, name string) (*os.File, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		if err == nil {
			err = fmt.Errorf("not a regular file or symlink (mode %#o)", st.Mode&unix.S_IFMT)
		}
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}
