package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
