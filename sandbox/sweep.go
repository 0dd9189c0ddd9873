package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// The sweep. When a sandbox with a read-write workspace has ended, Close takes away what
// it left there that the host's git would run, read as configuration, follow or hang on,
// in three steps:
//
//   - At the Absent protections (hooks, config.worktree, commondir, an included config
//     file, a core.hooksPath directory that were not there at start), what the sandbox made
//     is moved aside; a symbolic link on the way there is removed.
//   - Every git directory in the workspace that was not one at start (a `.git` directory,
//     one laid out as a git directory, a submodule's under modules/, a worktree's under
//     worktrees/), or that has another identity, is the sandbox's: its config,
//     config.worktree, hooks and commondir (unless that names a git directory of the start)
//     are moved aside, and a `.git` file (or link) the start did not have is moved aside
//     unless it names a git directory of the start. A gitlink the sandbox added to a
//     protected repository's index then leads the host's git to a repository without
//     configuration of its own.
//   - In every git directory, a symbolic link or a file that is not a regular one (a FIFO,
//     a socket, a device), which git would follow or block on, is removed unless it was
//     there at start.
//
// Nothing is followed: the walk opens one directory descriptor per level with O_NOFOLLOW.
// What is moved aside gets a fresh random name beside it (NAME.airlock-removed-HEX, renamed
// without replacing anything), which the sandbox cannot have taken; what cannot be moved is
// removed. Every path is reported, and every failure is an error.

// sweeper is one sweep of a workspace.
type sweeper struct {
	root    int                   // the workspace, O_PATH
	prots   map[string]Protection // the start's, by path
	removed []string
	errs    []error
	dirs    int
}

// sweepWorkspace sweeps the workspace (see above) given its protections at start; it
// returns the workspace-relative paths it moved aside or removed. A workspace the host has
// removed has nothing to sweep.
func sweepWorkspace(workspace string, prots []Protection) ([]string, error) {
	root, err := unix.Open(workspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sweep workspace: %w", err)
	}
	defer unix.Close(root)
	s := &sweeper{root: root, prots: map[string]Protection{}}
	for _, p := range prots {
		s.prots[p.Path] = p
	}
	for _, p := range prots {
		if p.Absent {
			s.absent(p.Path)
		}
	}
	s.walk()
	return s.removed, errors.Join(s.errs...)
}

func (s *sweeper) fail(rel string, err error) {
	s.errs = append(s.errs, fmt.Errorf("sweep %s: %w", rel, err))
}

// absent takes away what is at rel, or the first symbolic link on the way there.
func (s *sweeper) absent(rel string) {
	parts := strings.Split(rel, "/")
	dir, err := unix.Dup(s.root)
	if err != nil {
		s.fail(rel, err)
		return
	}
	defer func() { unix.Close(dir) }()
	for i, name := range parts {
		var st unix.Stat_t
		if unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			return // nothing there
		}
		at := strings.Join(parts[:i+1], "/")
		if i == len(parts)-1 || st.Mode&unix.S_IFMT == unix.S_IFLNK {
			s.takeAway(dir, name, at, st.Mode)
			return
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return // a file where a directory would be: git finds nothing below
		}
		next, err := unix.Openat(dir, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			s.fail(at, err)
			return
		}
		unix.Close(dir)
		dir = next
	}
}

// A dirItem is a directory the walk has still to read, and the git directory it is in
// ("" when none).
type dirItem struct{ rel, git string }

// walk visits every directory of the workspace, not following links.
func (s *sweeper) walk() {
	stack := []dirItem{{rel: ""}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if s.dirs++; s.dirs > maxScanDirs {
			s.errs = append(s.errs, fmt.Errorf("sweep: the workspace has more than %d directories: not all of it was swept", maxScanDirs))
			return
		}
		stack = s.visit(it, stack)
	}
}

// visit reads one directory, deals with what it holds and pushes its subdirectories.
func (s *sweeper) visit(it dirItem, stack []dirItem) []dirItem {
	fd, err := s.open(it.rel, unix.O_RDONLY)
	if err != nil {
		if !errors.Is(err, unix.ENOENT) {
			s.fail(it.rel, err)
		}
		return stack
	}
	defer unix.Close(fd)
	var layout []string
	err = readDir(fd, func(name string, typ uint32) {
		switch {
		case name == "HEAD" && typ != unix.S_IFDIR, name == "commondir",
			(name == "objects" || name == "refs") && typ == unix.S_IFDIR:
			layout = append(layout, name)
		}
	})
	if err != nil {
		s.fail(it.rel, err)
		return stack
	}
	if it.rel != "" && s.startsGitDir(it, layout) {
		s.gitDir(fd, it.rel)
		it.git = it.rel
	}
	err = readDir(fd, func(name string, typ uint32) {
		rel := path.Join(it.rel, name)
		switch {
		case typ == unix.S_IFDIR:
			stack = append(stack, dirItem{rel: rel, git: it.git})
		case typ == unix.S_IFREG:
			if name == ".git" && it.git == "" {
				s.gitFile(fd, name, rel)
			}
		case it.git != "" || name == ".git":
			// git would follow the link or block on the file.
			if !s.kept(fd, name, rel) {
				s.takeAway(fd, name, rel, typ)
			}
		}
	})
	if err != nil {
		s.fail(it.rel, err)
	}
	return stack
}

// startsGitDir reports whether the directory it.rel (whose entries include the names in
// layout) is a git directory: one of the start, a `.git` directory, one laid out as a git
// directory, or, inside a git directory, where git keeps submodules' and worktrees'.
func (s *sweeper) startsGitDir(it dirItem, layout []string) bool {
	switch {
	case s.prots[it.rel].GitDir:
		return true
	case it.git == "":
		return gitDirLayout(layout) || path.Base(it.rel) == ".git"
	default:
		return gitDirLayout(layout) && strings.HasPrefix(it.rel, path.Join(it.git, "modules")+"/") ||
			path.Dir(it.rel) == path.Join(it.git, "worktrees")
	}
}

// gitDir neutralises the git directory at rel (open as fd) unless it is one of the start.
func (s *sweeper) gitDir(fd int, rel string) {
	p, ok := s.prots[rel]
	if ok && p.GitDir && sameFile(fd, "", p) {
		return
	}
	for _, name := range []string{"config", "config.worktree", "hooks", "commondir"} {
		var st unix.Stat_t
		if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		if name == "commondir" && st.Mode&unix.S_IFMT == unix.S_IFREG && s.namesKnownGitDir(fd, name, path.Join(rel, name)) {
			continue // a worktree of a repository of the start
		}
		s.takeAway(fd, name, path.Join(rel, name), st.Mode)
	}
}

// gitFile moves aside a .git file the start did not have, unless it names a git directory
// of the start.
func (s *sweeper) gitFile(dir int, name, rel string) {
	if p, ok := s.prots[rel]; ok && !p.Absent && sameFile(dir, name, p) {
		return
	}
	if s.namesKnownGitDir(dir, name, rel) {
		return
	}
	s.takeAway(dir, name, rel, unix.S_IFREG)
}

// namesKnownGitDir reports whether the pointer file name in dir (a .git file's "gitdir:
// PATH", a commondir's PATH; rel is its workspace path) names a git directory of the start.
func (s *sweeper) namesKnownGitDir(dir int, name, rel string) bool {
	b, err := readSmallAt(dir, name)
	if err != nil {
		return false
	}
	target := strings.TrimSpace(string(b))
	if path.Base(rel) == ".git" {
		var ok bool
		if target, ok = strings.CutPrefix(target, "gitdir:"); !ok {
			return false
		}
		target = strings.TrimSpace(target)
	}
	if path.IsAbs(target) {
		return false // the host's own path: not of the workspace's git directories here
	}
	t := path.Join(path.Dir(rel), target)
	if t == ".." || strings.HasPrefix(t, "../") {
		return false
	}
	return s.prots[t].GitDir
}

// kept reports whether name in dir (at rel) was there at start, as it is.
func (s *sweeper) kept(dir int, name, rel string) bool {
	p, ok := s.prots[rel]
	return ok && !p.Absent && sameFile(dir, name, p)
}

// takeAway moves name in dir (at rel; typ its file type) aside, under a fresh random name
// beside it: a regular file or a directory, which may hold the workspace owner's work; a
// link or a special file is removed (nothing of it is lost, and git would still follow or
// block on it under another name in refs/). What cannot be moved aside is removed.
func (s *sweeper) takeAway(dir int, name, rel string, typ uint32) {
	typ &= unix.S_IFMT
	if typ == unix.S_IFREG || typ == unix.S_IFDIR {
		err := moveAside(dir, name)
		if err == nil {
			s.removed = append(s.removed, rel)
			return
		}
		if errors.Is(err, unix.ENOENT) {
			return
		}
		s.fail(rel, fmt.Errorf("move aside: %w; removing it instead", err))
	}
	if err := removeAt(dir, name, 0); err != nil {
		s.fail(rel, fmt.Errorf("remove: %w", err))
		return
	}
	s.removed = append(s.removed, rel)
}

// moveAside renames name in dir to NAME.airlock-removed-RANDOM, replacing nothing.
func moveAside(dir int, name string) error {
	var err error
	for range 8 {
		var b [12]byte
		if _, err := rand.Read(b[:]); err != nil {
			return err
		}
		to := name + ".airlock-removed-" + hex.EncodeToString(b[:])
		if err = unix.Renameat2(dir, name, dir, to, unix.RENAME_NOREPLACE); !errors.Is(err, unix.EEXIST) {
			return err
		}
	}
	return err
}

// removeAt removes name in dir and, if a directory, all it holds, not following links.
func removeAt(dir int, name string, depth int) error {
	err := unix.Unlinkat(dir, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) || !(errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM)) {
		return err
	}
	if depth > 256 {
		return errors.New("too deep")
	}
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	var errs []error
	err = readDir(fd, func(n string, _ uint32) { errs = append(errs, removeAt(fd, n, depth+1)) })
	unix.Close(fd)
	if err := errors.Join(append(errs, err)...); err != nil {
		return err
	}
	return unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
}

// open opens the workspace directory rel ("" for the workspace) one level at a time,
// following no link; flags are O_RDONLY or O_PATH.
func (s *sweeper) open(rel string, flags int) (int, error) {
	fd, err := unix.Dup(s.root)
	if err != nil {
		return -1, err
	}
	parts := strings.Split(rel, "/")
	if rel == "" {
		parts = nil
	}
	for i, name := range parts {
		f := unix.O_PATH
		if i == len(parts)-1 {
			f = flags
		}
		next, err := unix.Openat(fd, name, f|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	if len(parts) == 0 && flags != unix.O_PATH {
		next, err := unix.Openat(fd, ".", flags|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		return next, err
	}
	return fd, nil
}

// readDir calls f for each entry of the directory fd (its file type as S_IFMT bits, 0 when
// unknown), from the start, a batch at a time.
func readDir(fd int, f func(name string, typ uint32)) error {
	if _, err := unix.Seek(fd, 0, io.SeekStart); err != nil {
		return err
	}
	dup, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(dup), "dir")
	defer d.Close()
	for {
		entries, err := d.ReadDir(4096)
		for _, e := range entries {
			typ := uint32(0)
			switch t := e.Type(); {
			case t.IsDir():
				typ = unix.S_IFDIR
			case t.IsRegular():
				typ = unix.S_IFREG
			case t&os.ModeSymlink != 0:
				typ = unix.S_IFLNK
			default:
				typ = unix.S_IFIFO // a FIFO, socket or device: not a file git may read
			}
			f(e.Name(), typ)
		}
		if errors.Is(err, io.EOF) || err == nil && len(entries) == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// sameFile reports whether name in dir ("" for dir itself) is the file p was at start.
func sameFile(dir int, name string, p Protection) bool {
	var st unix.Stat_t
	var err error
	if name == "" {
		err = unix.Fstat(dir, &st)
	} else {
		err = unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	}
	return err == nil && p.Ino != 0 && st.Dev == p.Dev && st.Ino == p.Ino
}

// readSmallAt reads a regular file of at most 1 MiB beneath dir, not following a link and
// not waiting on a FIFO.
func readSmallAt(dir int, name string) ([]byte, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return readSmallFile(f)
}
