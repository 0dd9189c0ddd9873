package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/image"
)

// maskPaths is the mask list of native sandboxes on the host's root: the defaults plus
// sandbox.mask_paths, less sandbox.unmask_paths; ~/ is airlock's user's home ($HOME, else
// the user database's). A ~/ entry with neither is an error, not a path dropped: a mask
// that silently did not apply would show what it was meant to hide.
func (c *Config) maskPaths() ([]string, error) {
	return c.maskPathsHome(userHome)
}

// userHome is $HOME, else the current user's home in the user database; "" with neither.
func userHome() string {
	if h := os.Getenv("HOME"); filepath.IsAbs(h) {
		return h
	}
	if u, err := user.Current(); err == nil && filepath.IsAbs(u.HomeDir) {
		return u.HomeDir
	}
	return ""
}

func (c *Config) maskPathsHome(home func() string) ([]string, error) {
	var errs []error
	expand := func(key string, i int, p string) string {
		rest, ok := strings.CutPrefix(p, "~/")
		if !ok {
			return p
		}
		h := home()
		if h == "" {
			errs = append(errs, fmt.Errorf("%s[%d]: %q: ~/ needs a home directory, and $HOME is unset and the user database has none for uid %d: set HOME or give the absolute path", key, i, p, os.Getuid()))
			return ""
		}
		return filepath.Join(h, rest)
	}
	var unmask []string
	for i, p := range c.Sandbox.UnmaskPaths {
		unmask = append(unmask, filepath.Clean(expand("sandbox.unmask_paths", i, p)))
	}
	out := []string{}
	for _, p := range sandbox.DefaultMaskPaths {
		if p = filepath.Clean(p); !slices.Contains(unmask, p) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for i, p := range c.Sandbox.MaskPaths {
		p = filepath.Clean(expand("sandbox.mask_paths", i, p))
		if filepath.IsAbs(p) && !slices.Contains(unmask, p) && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// nativeRoot sets the native sandbox's root file system from --rootfs or --image (else the
// config's sandbox.rootfs or sandbox.image): a directory as it is, an image unpacked into
// $AIRLOCK_HOME/images once, whose configuration's Env, WorkingDir and User the sandbox
// honours (sandbox.ImageConfig).
func nativeRoot(ctx context.Context, cfg *Config, sf *sandboxFlags, o *sandbox.Options) error {
	rootfs, img := cfg.Sandbox.Rootfs, cfg.Sandbox.Image
	if sf.rootfs != "" {
		rootfs, img = sf.rootfs, ""
	} else if sf.image != "" {
		rootfs = ""
	}
	switch {
	case rootfs != "" && img != "":
		return errors.New("a native sandbox's root is one of --rootfs (a directory) and --image (an image), not both")
	case rootfs != "":
		fi, err := os.Stat(rootfs)
		if err != nil {
			return fmt.Errorf("--rootfs: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("--rootfs %s: not a directory (an image tarball is --image)", rootfs)
		}
		o.Rootfs = resolved(rootfs)
	case img != "":
		c := &image.Cache{Dir: filepath.Join(cfg.Home, "images")}
		root, err := c.Resolve(ctx, img)
		if err != nil {
			return fmt.Errorf("--image: %w", err)
		}
		if o.Image, err = image.LoadConfig(root); err != nil {
			return fmt.Errorf("--image %s: %w", img, err)
		}
		o.Rootfs = resolved(root)
	}
	return nil
}

// resolved is p with its links resolved, once, here: the native backend mounts a root or
// a workspace only through a path with no link in it. p as it is if that fails (the
// backend then says what is wrong).
func resolved(p string) string {
	if real, err := filepath.EvalSymlinks(p); err == nil {
		return real
	}
	return p
}
