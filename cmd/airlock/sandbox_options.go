package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/spf13/cobra"
)

// parseWorkspace reads --workspace DIR[:ro|:cow]; a suffix that is no mode is refused
// (naming the modes) unless a directory of that whole name exists.
func parseWorkspace(s string) (string, sandbox.WorkspaceMode, error) {
	dir, mode, err := sandbox.ParseWorkspace(s)
	if err != nil {
		return "", "", err
	}
	if i := strings.LastIndexByte(dir, ':'); i >= 0 && dir == s {
		suffix := dir[i+1:]
		if _, serr := os.Stat(dir); serr != nil && suffix != "" && !strings.ContainsRune(suffix, '/') {
			return "", "", fmt.Errorf("%q: unknown mode %q; want DIR (read-write), DIR:ro (read-only) or DIR:cow (copy-on-write)", s, suffix)
		}
	}
	// Links resolved here, once: the native backend mounts a workspace path only if it has
	// no link in it (a link swapped in after a check would mount another directory).
	return resolved(dir), mode, nil
}

// configFile is the --config flag's file, "" when none.
func configFile(cmd *cobra.Command) string {
	if f := cmd.Flags().Lookup("config"); f != nil {
		return f.Value.String()
	}
	return ""
}

// hostBounds sets the bounds on host-wide kernel tables and disk from the config and the
// flags (which win); a value given must be positive.
func hostBounds(cmd *cobra.Command, cfg *Config, sf *sandboxFlags, o *sandbox.Options) error {
	c := cfg.Sandbox
	for _, b := range []struct {
		flag, key string
		conf      int
		val       int64
		dst       *int64
	}{
		{"nofile", "sandbox.nofile", c.Nofile, sf.nofile, &o.Nofile},
		{"ptys", "sandbox.ptys", c.Ptys, sf.ptys, &o.Ptys},
		{"inodes", "sandbox.inodes", c.Inodes, sf.inodes, &o.Inodes},
	} {
		switch {
		case cmd.Flags().Changed(b.flag):
			if b.val <= 0 {
				return fmt.Errorf("--%s %d: want a positive number", b.flag, b.val)
			}
			*b.dst = b.val
		case b.conf < 0:
			return fmt.Errorf("%s: %d: want a positive number", b.key, b.conf)
		default:
			*b.dst = int64(b.conf)
		}
	}
	disk, what := c.Disk, "sandbox.disk"
	if cmd.Flags().Changed("disk") {
		disk, what = sf.disk, "--disk"
	}
	if disk != "" {
		n, err := sandbox.ParseSize(disk)
		if err == nil && n < 16<<20 {
			err = fmt.Errorf("%s: at least 16M", disk)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		o.Disk = n
	}
	return nil
}

// sandboxOptions reads the sandbox's options from the config and the flags (which win). A
// limit given on the command line must mean something: a negative or non-numeric one is
// refused rather than silently replaced by the configured value.
func sandboxOptions(cmd *cobra.Command, cfg *Config, sf *sandboxFlags) (sandbox.Options, error) {
	if err := checkLimitFlags(cmd, sf); err != nil {
		return sandbox.Options{}, err
	}
	o := sandbox.Options{ID: sf.id, Timeout: cfg.Sandbox.Timeout, Pids: int64(cfg.Sandbox.Pids), CPUs: cfg.Sandbox.CPUs, Env: sf.env,
		AllowAIO: cfg.Sandbox.AllowAIO || sf.allowAIO, ProtectedPaths: cfg.Sandbox.ProtectedPaths,
		HiddenPaths: cfg.hiddenPaths(configFile(cmd))}
	mask, err := cfg.maskPaths()
	if err != nil {
		return o, err
	}
	o.MaskPaths = mask
	o.ProxyOnly = cfg.Sandbox.Transparent != nil && !*cfg.Sandbox.Transparent
	if cmd.Flags().Changed("transparent") {
		o.ProxyOnly = !sf.transparent
	}
	if sf.allowUnenforced {
		cfg.Sandbox.AllowUnenforcedLimits = true
	}
	if sf.cgroupParent != "" {
		if !filepath.IsAbs(sf.cgroupParent) {
			return o, fmt.Errorf("--cgroup-parent %q: want an absolute path, e.g. /sys/fs/cgroup/airlock-USER", sf.cgroupParent)
		}
		cfg.Sandbox.CgroupParent = sf.cgroupParent
	}
	if err := protectFlags(sf.protect, &o); err != nil {
		return o, err
	}
	if cmd.Flags().Changed("timeout") {
		o.Timeout = sf.timeout
	}
	if err := memoryLimit(cfg, sf, &o); err != nil {
		return o, err
	}
	if sf.pids > 0 {
		o.Pids = sf.pids
	}
	if sf.cpus > 0 {
		o.CPUs = sf.cpus
	}
	if err := hostBounds(cmd, cfg, sf, &o); err != nil {
		return o, err
	}
	if sf.workspace != "" {
		dir, mode, err := parseWorkspace(sf.workspace)
		if err != nil {
			return o, fmt.Errorf("--workspace: %w", err)
		}
		o.Workspace, o.WorkspaceMode = dir, mode
	}
	if err := labelFlags(sf.labels, &o); err != nil {
		return o, err
	}
	return o, checkOutputFlags(sf, o)
}

// checkLimitFlags refuses a limit flag that is negative, not a number, or zero when given.
func checkLimitFlags(cmd *cobra.Command, sf *sandboxFlags) error {
	switch {
	case sf.timeout < 0:
		return fmt.Errorf("--timeout %s: want a positive duration such as 30s or 10m", sf.timeout)
	case sf.pids < 0 || cmd.Flags().Changed("pids") && sf.pids == 0:
		return fmt.Errorf("--pids %d: want a positive number of processes", sf.pids)
	case math.IsNaN(sf.cpus) || math.IsInf(sf.cpus, 0) || sf.cpus < 0 || cmd.Flags().Changed("cpus") && sf.cpus == 0:
		return fmt.Errorf("--cpus %v: want a positive number of cores, e.g. 0.5 or 2", sf.cpus)
	}
	if cmd.Flags().Changed("id") {
		if err := identity.CheckID(sf.id); err != nil {
			return fmt.Errorf("--id: %w", err)
		}
	}
	return nil
}

// protectFlags adds the --protect paths to the configured (or default) protected paths.
func protectFlags(protect []string, o *sandbox.Options) error {
	if len(protect) > 0 {
		if o.ProtectedPaths == nil {
			o.ProtectedPaths = sandbox.DefaultProtectedPaths
		}
		o.ProtectedPaths = append(slices.Clone(o.ProtectedPaths), protect...)
	}
	for _, p := range protect {
		if err := sandbox.CheckProtectedPath(p); err != nil {
			return fmt.Errorf("--protect: %w", err)
		}
	}
	return nil
}

// memoryLimit sets the memory limit from --memory, or else sandbox.memory.
func memoryLimit(cfg *Config, sf *sandboxFlags, o *sandbox.Options) error {
	mem, memKey := cfg.Sandbox.Memory, "sandbox.memory"
	if sf.memory != "" {
		mem, memKey = sf.memory, "--memory"
	}
	if mem == "" {
		return nil
	}
	n, err := parseMemory(mem)
	if err != nil {
		return fmt.Errorf("%s: %w", memKey, err)
	}
	o.Memory = n
	return nil
}

// labelFlags reads the --label K=V flags.
func labelFlags(labels []string, o *sandbox.Options) error {
	for _, kv := range labels {
		k, v, err := sandbox.ParseKV(kv)
		if err != nil {
			return fmt.Errorf("--label: %w", err)
		}
		if o.Labels == nil {
			o.Labels = map[string]string{}
		}
		o.Labels[k] = v
	}
	return nil
}

// checkOutputFlags refuses --disk, --patch and --report where they cannot mean what they
// say.
func checkOutputFlags(sf *sandboxFlags, o sandbox.Options) error {
	if o.Disk > 0 && o.Workspace != "" && o.WorkspaceMode == sandbox.WorkspaceRW {
		// A read-write workspace is the host directory itself: only file system quotas
		// could bound it, and a bound that does not hold is not offered.
		return fmt.Errorf("--disk bounds a copy-on-write workspace's changes; a read-write workspace writes the host directory itself, which --disk cannot bound: use --workspace DIR:cow, or file system quotas")
	}
	if sf.patch != "" && o.WorkspaceMode != sandbox.WorkspaceCoW {
		return fmt.Errorf("--patch needs a copy-on-write workspace (--workspace DIR:cow)")
	}
	if sf.patch != "" && sf.report != "" && filepath.Clean(sf.patch) == filepath.Clean(sf.report) {
		return fmt.Errorf("--patch and --report name the same file %s", sf.report)
	}
	return nil
}
