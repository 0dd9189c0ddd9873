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

// The host runs what a workspace holds: git runs a repository's hooks and the commands its
// config names (core.fsmonitor, core.sshCommand, filter drivers...), editors run a
// folder's tasks, direnv its .envrc. So in a read-write workspace (and a copy-on-write one,
// whose patch would carry the change), those files are read-only inside the sandbox, for
// every repository found when it starts. A git directory, and every directory between it
// and the workspace, is also a mount point inside, so that it cannot be renamed away and
// replaced by one the sandbox made (the kernel refuses to rename a mount point, but not
// its ancestors).

// DefaultProtectedPaths are the workspace paths besides git's that Options.ProtectedPaths
// protects when nil: what editors, direnv, package managers, git tools and agents run or
// read as configuration on the host (the sets codex and Anthropic's sandbox-runtime
// protect are similar).
var DefaultProtectedPaths = []string{
	".gitmodules", ".pre-commit-config.yaml", ".husky",
	".vscode", ".idea", ".devcontainer", ".envrc", ".mise.toml", "mise.toml",
	".npmrc", ".yarnrc", ".yarnrc.yml",
	".claude", ".mcp.json", ".cursor", ".codex",
	".gitconfig", ".bashrc", ".bash_profile", ".bash_login", ".profile",
	".zshrc", ".zshenv", ".zprofile", ".zlogin",
}

// maxScanDirs bounds the directories a workspace scan visits for nested repositories.
var maxScanDirs = 200_000

// A Protection is a path of the workspace that a sandbox can neither rename nor replace
// (it is a mount point inside), nor, when ReadOnly, change; or, when not Bound, a path the
// sweep at the end needs to know of.
type Protection struct {
	Path     string // relative to the workspace, slash-separated
	ReadOnly bool
	// Absent marks a path git reads (in a git directory: hooks, config,
	// config.worktree, commondir; a core.hooksPath directory; an included config file) that
	// did not exist when the sandbox started, so nothing could be bound there: backends
	// bind nothing, and when the sandbox ends, Close moves aside whatever it made there.
	Absent bool
	// GitDir marks a git directory found at start. The sweep at the end neutralises every
	// git directory that is not one of these (with the same identity): the sandbox's.
	GitDir bool
	// Kept marks a symbolic link or a file that is not a regular one (a FIFO, a socket, a
	// device) inside a git directory at start: the sweep removes every other one it finds
	// there, since git would follow it or hang on it. Backends bind nothing for it.
	Kept bool
	// Dev and Ino are the path's identity at start (not for Absent ones).
	Dev, Ino uint64
}

// Bound reports whether backends bind the path inside the sandbox: every protection but the
// Absent and Kept ones, which are for the sweep at the end.
func (p Protection) Bound() bool { return !p.Absent && !p.Kept }

// WorkspaceProtections lists the protections of o's workspace, parents before children:
// none for a read-only workspace or none at all. For each git repository in the workspace
// when it starts (the workspace's own, nested ones, submodules under .git/modules,
// worktrees, bare repositories, and git directories that a .git file points to inside the
// workspace), the git directory is pinned and its hooks, config, config.worktree and
// commondir are read-only, as are a .git file, the directory core.hooksPath names and the
// files config includes, when inside the workspace; then the existing paths of
// o.ProtectedPaths (DefaultProtectedPaths when nil) are read-only. A path that does not
// exist at start cannot be bound: those git reads are listed as Absent, for the sweep when
// the sandbox ends (docs/threat-model.md says what that leaves open).
func WorkspaceProtections(o Options) ([]Protection, error) {
	if o.Workspace == "" || o.WorkspaceMode == WorkspaceRO {
		return nil, nil
	}
	root, err := filepath.EvalSymlinks(o.Workspace)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	paths := o.ProtectedPathsOrDefault()
	s := &scan{root: root, ro: map[string]bool{}, gitDirs: map[string]bool{}, absent: map[string]bool{}, kept: map[string]bool{}, walked: map[string]bool{}}
	for _, p := range paths {
		rel, err := cleanRel(p)
		if err != nil {
			return nil, fmt.Errorf("protected path %w", err)
		}
		s.protect(rel, true)
	}
	s.globalHooks = hostGitConfig()
	if err := s.walk(); err != nil {
		return nil, err
	}
	return s.list(), nil
}

// ProtectedPathsOrDefault are o.ProtectedPaths, or DefaultProtectedPaths when nil.
func (o Options) ProtectedPathsOrDefault() []string {
	if o.ProtectedPaths == nil {
		return DefaultProtectedPaths
	}
	return o.ProtectedPaths
}

// CheckProtectedPath checks an entry of Options.ProtectedPaths: a path inside the
// workspace, relative to it.
func CheckProtectedPath(p string) error {
	_, err := cleanRel(p)
	return err
}

func cleanRel(p string) (string, error) {
	c := filepath.Clean(filepath.FromSlash(p))
	if p == "" || filepath.IsAbs(c) || c == "." || c == ".." || strings.HasPrefix(c, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%q: want a path inside the workspace, relative to it", p)
	}
	return c, nil
}

type scan struct {
	root        string
	ro          map[string]bool // protected path → read-only
	gitDirs     map[string]bool
	globalHooks gitConfig // the host user's and the system's git config
	dirs        int
	absent      map[string]bool // paths git reads that were absent at start
	kept        map[string]bool // symbolic links and special files in git directories at start
	walked      map[string]bool // directories inventory has seen
}

// inside turns path (absolute, or relative to the workspace) into a workspace-relative
// path without symlinks, or reports that it leads outside or nowhere.
func (s *scan) inside(path string) (string, bool) {
	if !filepath.IsAbs(path) {
		path = filepath.Join(s.root, path)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", false
	}
	rel, err := filepath.Rel(s.root, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	return rel, true
}

// insideMissing is inside for a path that does not exist: its nearest existing ancestor
// resolved, the rest appended (nothing there can be a link yet).
func (s *scan) insideMissing(path string) (string, bool) {
	if !filepath.IsAbs(path) {
		path = filepath.Join(s.root, path)
	}
	path = filepath.Clean(path)
	rest := ""
	for dir := path; ; dir = filepath.Dir(dir) {
		if _, err := os.Lstat(dir); err == nil {
			real, ok := s.inside(dir)
			if !ok {
				return "", false
			}
			if fi, err := os.Stat(filepath.Join(s.root, real)); err != nil || !fi.IsDir() || rest == "" {
				return "", false // not a directory: nothing can be made below it
			}
			return filepath.Join(real, rest), true
		}
		if filepath.Dir(dir) == dir {
			return "", false
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// gitReads records a path git reads as configuration or runs: read-only when it exists,
// else swept when the sandbox ends.
func (s *scan) gitReads(path string) {
	if _, err := os.Lstat(s.abs(path)); err == nil {
		s.protect(path, true)
	} else if rel, ok := s.insideMissing(path); ok {
		s.absent[rel] = true
	}
}

func (s *scan) abs(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(s.root, path)
}

// protect records rel (relative to the workspace; its target if it is or passes a
// symlink, when that is inside the workspace) when it exists.
func (s *scan) protect(rel string, readOnly bool) {
	real, ok := s.inside(rel)
	if !ok {
		return // absent, or outside the workspace, where the sandbox cannot write
	}
	if real == "." {
		return // the workspace itself is a mount point already
	}
	s.ro[real] = s.ro[real] || readOnly
}

// list is the protections with every directory between a protected (or absent) path and
// the workspace pinned, sorted so that a parent is mounted before its children.
func (s *scan) list() []Protection {
	var paths []string
	for rel := range s.ro {
		paths = append(paths, rel)
	}
	for rel := range s.absent {
		paths = append(paths, rel)
	}
	for _, rel := range paths {
		for d := filepath.Dir(rel); d != "."; d = filepath.Dir(d) {
			if _, ok := s.ro[d]; ok || s.absent[d] {
				continue
			}
			if fi, err := os.Lstat(filepath.Join(s.root, d)); err == nil && fi.IsDir() {
				s.ro[d] = false
			}
		}
	}
	out := make([]Protection, 0, len(s.ro)+len(s.absent)+len(s.kept))
	for rel, ro := range s.ro {
		p := Protection{Path: filepath.ToSlash(rel), ReadOnly: ro, GitDir: s.gitDirs[rel]}
		p.Dev, p.Ino = fileID(filepath.Join(s.root, rel))
		out = append(out, p)
	}
	for rel := range s.absent {
		out = append(out, Protection{Path: filepath.ToSlash(rel), Absent: true})
	}
	for rel := range s.kept {
		if _, ok := s.ro[rel]; ok {
			continue // protected as it is
		}
		p := Protection{Path: filepath.ToSlash(rel), Kept: true}
		p.Dev, p.Ino = fileID(filepath.Join(s.root, rel))
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Protection) int {
		if d := strings.Count(a.Path, "/") - strings.Count(b.Path, "/"); d != 0 {
			return d
		}
		return strings.Compare(a.Path, b.Path)
	})
	return out
}

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
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err == nil && len(b) > 1<<20 {
		err = errors.New("larger than 1 MiB")
	}
	return b, err
}
