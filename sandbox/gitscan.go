package sandbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// The workspace scan's walk for git repositories and what each one reads (see
// WorkspaceProtections).

// walk visits every directory of the workspace (not following symlinks) for repositories.
func (s *scan) walk() error {
	stack := []string{"."}
	for len(stack) > 0 {
		dir := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if s.dirs++; s.dirs > maxScanDirs {
			return fmt.Errorf("workspace %s: more than %d directories to scan for git repositories to protect; use a smaller workspace or mount it read-only", s.root, maxScanDirs)
		}
		entries, err := os.ReadDir(filepath.Join(s.root, dir))
		if err != nil {
			return fmt.Errorf("scan workspace: %w", err)
		}
		if looksLikeGitDir(entries) {
			if err := s.gitDir(dir, dir); err != nil {
				return err
			}
			continue // git's own files: gitDir saw what matters
		}
		for _, e := range entries {
			rel := filepath.Join(dir, e.Name())
			switch {
			case e.Name() == ".git" && e.IsDir():
				if err := s.gitDir(rel, dir); err != nil {
					return err
				}
			case e.Name() == ".git" && e.Type().IsRegular():
				if err := s.gitFile(rel, dir); err != nil {
					return err
				}
			case e.Name() == ".git" && e.Type()&fs.ModeSymlink != 0:
				s.kept[rel] = true // the sweep at the end leaves it
				if target, ok := s.inside(rel); ok {
					if err := s.gitDir(target, dir); err != nil {
						return err
					}
				}
			case e.IsDir():
				stack = append(stack, rel)
			}
		}
	}
	return nil
}

// looksLikeGitDir reports whether a directory's entries are laid out as a git directory's
// (git takes one as a bare repository when run inside it): a HEAD, and objects and refs
// or a commondir that provides them.
func looksLikeGitDir(entries []fs.DirEntry) bool {
	names := make([]string, 0, 4)
	for _, e := range entries {
		if e.Name() == "HEAD" && !e.IsDir() || (e.Name() == "objects" || e.Name() == "refs") && e.IsDir() || e.Name() == "commondir" {
			names = append(names, e.Name())
		}
	}
	return gitDirLayout(names)
}

// gitDirLayout is looksLikeGitDir on the names found of HEAD, objects and refs (both
// directories) and commondir.
func gitDirLayout(names []string) bool {
	has := func(n string) bool { return slices.Contains(names, n) }
	return has("HEAD") && (has("commondir") || has("objects") && has("refs"))
}

// gitFile protects a .git file ("gitdir: PATH", in a linked worktree or a submodule's
// checkout) and the git directory it names, when inside the workspace.
func (s *scan) gitFile(rel, worktree string) error {
	s.protect(rel, true)
	b, err := readSmall(filepath.Join(s.root, rel))
	if err != nil {
		return nil // not readable: git cannot use it either
	}
	target, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:")
	if !ok {
		return nil
	}
	target = strings.TrimSpace(target)
	if !filepath.IsAbs(target) {
		target = filepath.Join(s.root, worktree, target)
	}
	if dir, ok := s.inside(target); ok {
		return s.gitDir(dir, worktree)
	}
	return nil
}

// gitDir protects a git directory (relative to the workspace) whose checkout, if any, is
// worktree: the directory is pinned; hooks, config, config.worktree and commondir are
// read-only; the directory core.hooksPath names, the files the config includes, the
// common directory commondir names, submodules' and worktrees' git directories are
// protected in turn.
func (s *scan) gitDir(dir, worktree string) error {
	if s.gitDirs[dir] {
		return nil
	}
	s.gitDirs[dir] = true
	s.protect(dir, false)
	if err := s.inventory(dir); err != nil {
		return err
	}
	for _, name := range []string{"hooks", "config", "config.worktree", "commondir"} {
		s.gitReads(filepath.Join(dir, name))
	}
	var cfg gitConfig
	for _, name := range []string{"config", "config.worktree"} {
		s.readConfig(filepath.Join(s.root, dir, name), &cfg, 0)
	}
	if wt := cfg.last("core.worktree"); wt != "" {
		if !filepath.IsAbs(wt) {
			wt = filepath.Join(s.root, dir, wt)
		}
		if rel, ok := s.inside(wt); ok {
			worktree = rel
		}
	}
	hookBase := filepath.Join(s.root, worktree)
	if dir == worktree { // bare: hooks run in the git directory
		hookBase = filepath.Join(s.root, dir)
	}
	for _, h := range append(s.globalHooks.all("core.hookspath"), cfg.all("core.hookspath")...) {
		if h = expandHome(h); !filepath.IsAbs(h) {
			h = filepath.Join(hookBase, h)
		}
		s.gitReads(h)
	}
	if b, err := readSmall(filepath.Join(s.root, dir, "commondir")); err == nil {
		common := strings.TrimSpace(string(b))
		if !filepath.IsAbs(common) {
			common = filepath.Join(s.root, dir, common)
		}
		if rel, ok := s.inside(common); ok {
			if err := s.gitDir(rel, worktree); err != nil {
				return err
			}
		}
	}
	if err := s.moduleDirs(filepath.Join(dir, "modules"), 0); err != nil {
		return err
	}
	wts, _ := os.ReadDir(filepath.Join(s.root, dir, "worktrees"))
	for _, w := range wts {
		if w.IsDir() {
			// A linked worktree's git directory; its checkout is elsewhere, found by the
			// walk when inside the workspace through its .git file.
			wd := filepath.Join(dir, "worktrees", w.Name())
			if err := s.gitDir(wd, wd); err != nil {
				return err
			}
		}
	}
	return nil
}

// moduleDirs finds submodules' git directories under a git directory's modules/ (a
// submodule's name may contain slashes, so they may be nested).
func (s *scan) moduleDirs(dir string, depth int) error {
	entries, err := os.ReadDir(filepath.Join(s.root, dir))
	if err != nil || depth > 16 {
		return nil
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		sub := filepath.Join(dir, e.Name())
		if s.dirs++; s.dirs > maxScanDirs {
			return fmt.Errorf("workspace %s: more than %d directories to scan for git repositories to protect", s.root, maxScanDirs)
		}
		subEntries, _ := os.ReadDir(filepath.Join(s.root, sub))
		if looksLikeGitDir(subEntries) {
			if err := s.gitDir(sub, sub); err != nil {
				return err
			}
			continue
		}
		if err := s.moduleDirs(sub, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// readConfig adds the git config file path (and, depth-first, the files it includes) to
// cfg, and protects included files inside the workspace: git reads them as config.
func (s *scan) readConfig(path string, cfg *gitConfig, depth int) {
	b, err := readSmall(path)
	if err != nil || depth > 10 {
		return
	}
	c := parseGitConfig(string(b))
	for _, inc := range c.includes() {
		if inc = expandHome(inc); !filepath.IsAbs(inc) {
			inc = filepath.Join(filepath.Dir(path), inc)
		}
		s.gitReads(inc)
		s.readConfig(inc, cfg, depth+1)
	}
	cfg.entries = append(cfg.entries, c.entries...)
}

// hostGitConfig is the git configuration of the user running airlock and of the system,
// for a core.hooksPath that applies to every repository.
func hostGitConfig() gitConfig {
	var cfg gitConfig
	files := []string{"/etc/gitconfig"}
	if home, err := os.UserHomeDir(); err == nil {
		xdg := os.Getenv("XDG_CONFIG_HOME")
		if xdg == "" {
			xdg = filepath.Join(home, ".config")
		}
		files = append(files, filepath.Join(xdg, "git", "config"), filepath.Join(home, ".gitconfig"))
	}
	for _, f := range files {
		if b, err := readSmall(f); err == nil {
			cfg.entries = append(cfg.entries, parseGitConfig(string(b)).entries...)
		}
	}
	return cfg
}

func expandHome(p string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if home, err := os.UserHomeDir(); err == nil {
			return filepath.Join(home, rest)
		}
	}
	return p
}

// inventory records the symbolic links and special files of a git directory at start
// (git-new-workdir links a checkout's refs, config and objects to another repository's):
// the sweep at the end leaves those and removes any other.
func (s *scan) inventory(dir string) error {
	stack := []string{dir}
	for len(stack) > 0 {
		d := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if s.walked[d] {
			continue
		}
		s.walked[d] = true
		if s.dirs++; s.dirs > maxScanDirs {
			return fmt.Errorf("workspace %s: more than %d directories to scan for git repositories to protect", s.root, maxScanDirs)
		}
		entries, err := os.ReadDir(filepath.Join(s.root, d))
		if err != nil {
			continue // unreadable: git cannot read it either
		}
		for _, e := range entries {
			rel := filepath.Join(d, e.Name())
			switch {
			case e.IsDir():
				stack = append(stack, rel)
			case !e.Type().IsRegular():
				s.kept[rel] = true
			}
		}
	}
	return nil
}

// fileID is path's device and inode (not following a last symlink); zero when absent.
func fileID(path string) (dev, ino uint64) {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return 0, 0
	}
	return st.Dev, st.Ino
}

// readSmall reads a regular file of at most 1 MiB (git's pointer and config files). A FIFO
// is not waited on.
func readSmall(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readSmallFile(f)
}

// readSmallFile reads f, opened without blocking, if it is a regular file of at most 1 MiB.
func readSmallFile(f *os.File) ([]byte, error) {
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err == nil && len(b) > 1<<20 {
		err = errors.New("larger than 1 MiB")
	}
	return b, err
}
