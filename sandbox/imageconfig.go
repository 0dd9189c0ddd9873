package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// ImageConfig is what an image's configuration says about running it, honoured by a
// sandbox whose Rootfs is that image (native backend):
//   - Env lies under the sandbox's own environment: the proxy variables, the CA paths,
//     HOME, USER and Options.Env win; the image's PATH replaces DefaultPath.
//   - WorkingDir is the directory of commands that name none (before /workspace and
//     $HOME); it must be a directory of the image (nothing is made in the read-only root).
//   - User is checked, not obeyed: a sandbox runs as its own unprivileged user (uid 1000,
//     "sandbox"), never as root. A name is looked up in the image's /etc/passwd (never the
//     host's); root (uid 0) and uid 1000 run as the sandbox user; any other user cannot
//     be mapped and the sandbox is refused, saying so.
type ImageConfig struct {
	Env        []string
	WorkingDir string
	User       string
}

// SandboxUID is the uid a sandbox's commands run as, inside it.
const SandboxUID = 1000

// checkImage validates o.Image against o.Rootfs.
func checkImage(o Options) error {
	if o.Image == nil {
		return nil
	}
	if o.Rootfs == "/" {
		return errors.New("an image configuration needs the image as the root file system (Rootfs)")
	}
	return o.Image.Check(o.Rootfs)
}

// Check validates the configuration against the image's root file system rootfs: what a
// sandbox refuses to start with (see ImageConfig).
func (ic *ImageConfig) Check(rootfs string) error {
	for _, kv := range ic.Env {
		if !validEnv(kv) {
			return fmt.Errorf("image config: environment entry %q: want K=V", kv)
		}
	}
	if wd := ic.WorkingDir; wd != "" {
		if !path.IsAbs(wd) {
			return fmt.Errorf("image config: WorkingDir %q is not an absolute path", wd)
		}
		p, err := resolveIn(rootfs, wd)
		fi, err2 := os.Lstat(p)
		if err != nil || err2 != nil || !fi.IsDir() {
			return fmt.Errorf("image config: WorkingDir %s is not a directory of the image (a native sandbox's root is read-only: nothing is made there)", wd)
		}
	}
	if ic.User != "" {
		uid, err := ImageUID(rootfs, ic.User)
		if err != nil {
			return err
		}
		if uid != 0 && uid != SandboxUID {
			return fmt.Errorf("image config: User %q is uid %d; a native sandbox runs its commands as uid %d (or, for an image made to run as root, as that unprivileged user): rebuild the image for uid %d or no USER", ic.User, uid, SandboxUID, SandboxUID)
		}
	}
	return nil
}

// resolveIn resolves p inside the root file system rootfs as the sandbox would see it:
// the image's links, absolute or relative, are followed within rootfs and never out of it.
func resolveIn(rootfs, p string) (string, error) {
	rest := strings.Split(strings.TrimPrefix(path.Clean("/"+p), "/"), "/")
	cur := "/"
	for hops := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		next := path.Join(cur, name) // ".." stops at "/"
		fi, err := os.Lstat(filepath.Join(rootfs, next))
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", errors.New("too many links")
		}
		target, err := os.Readlink(filepath.Join(rootfs, next))
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			cur = "/"
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return filepath.Join(rootfs, cur), nil
}

// ImageUID resolves an image's User ("name", "uid", "name:group" or "uid:gid") to a uid:
// a number as it is, a name through the image's own /etc/passwd under rootfs.
func ImageUID(rootfs, user string) (int, error) {
	name, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(name); err == nil && n >= 0 {
		return n, nil
	}
	p, err := resolveIn(rootfs, "/etc/passwd")
	var f *os.File
	if err == nil {
		f, err = os.Open(p)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("image config: User %q: the image has no /etc/passwd to name it", user)
	}
	if err != nil {
		return 0, fmt.Errorf("image config: User %q: %w", user, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) >= 3 && fields[0] == name {
			n, err := strconv.Atoi(fields[2])
			if err != nil || n < 0 {
				return 0, fmt.Errorf("image config: User %q: its /etc/passwd entry has uid %q", user, fields[2])
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("image config: User %q is not in the image's /etc/passwd", user)
}

// imageEnv puts the image's environment under the sandbox's own (see ImageConfig).
func imageEnv(ic *ImageConfig, own []string) []string {
	if ic == nil || len(ic.Env) == 0 {
		return own
	}
	for _, kv := range ic.Env {
		if k, _, _ := strings.Cut(kv, "="); k == "PATH" {
			own = MergeEnv(own, []string{kv})
		}
	}
	return MergeEnv(ic.Env, own)
}

// DefaultDir is the directory of commands that name none: the image's WorkingDir, else
// /workspace when the sandbox has one, else $HOME.
func (s *Sandbox) DefaultDir() string {
	switch {
	case s.opts.Image != nil && s.opts.Image.WorkingDir != "":
		return path.Clean(s.opts.Image.WorkingDir)
	case s.opts.Workspace != "":
		return WorkspaceDir
	}
	return HomeDir
}
