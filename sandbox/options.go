package sandbox

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-proxy/airlock/internal/identity"
)

// WorkspaceMode says how the workspace directory is mounted.
type WorkspaceMode string

// Workspace modes.
const (
	WorkspaceRW  WorkspaceMode = "rw"  // read-write: the sandbox changes the host directory
	WorkspaceRO  WorkspaceMode = "ro"  // read-only
	WorkspaceCoW WorkspaceMode = "cow" // copy-on-write: the host directory stays untouched; see Changes and Patch
)

// Options describe a sandbox. The zero value plus a Backend is a sandbox with no workspace,
// no network (no Proxy), the host's root read-only, and default limits.
type Options struct {
	ID     string            // unique id (identity.CheckID: lower-case); generated ("sbx-" + hex) when empty
	Labels map[string]string // identity labels handed to the proxy
	// PolicyRevision is copied into the run report.
	PolicyRevision string

	Workspace     string        // host directory mounted at /workspace; none when empty
	WorkspaceMode WorkspaceMode // default rw
	// Rootfs is the sandbox's root file system, read-only; default "/", the host's (its
	// /usr, /etc, /opt...). Another directory (an unpacked image: see sandbox/image) is a
	// whole root of its own: native sandboxes see it through a read-only overlay, with
	// their own /etc/passwd, group, hosts and resolver configuration and the CA bundle
	// where the image's tools look.
	Rootfs string
	// Image is the configuration of the image Rootfs holds (its Env, WorkingDir and
	// User: see ImageConfig); nil: none (the host's root, a plain directory).
	Image *ImageConfig
	// ReadOnlyPaths are further host paths bound read-only at the same place (e.g. a
	// toolchain outside /usr). The native backend refuses one at or beneath a mask path.
	ReadOnlyPaths []string
	// HiddenPaths are host paths the sandbox must not read (airlock's config, its secret
	// files, its home): wherever the sandbox would see one (under the root's directories,
	// a read-only path, the workspace), it is covered by an empty read-only file or
	// directory. A link to one is hidden through its target; another hard link is not.
	HiddenPaths []string
	// MaskPaths are host paths holding secrets that a sandbox whose root is the host's
	// must not see (see DefaultMaskPaths, which nil means; empty masks nothing).
	MaskPaths []string

	Timeout time.Duration // wall-clock limit per Run; 0 means none
	// Memory is the memory limit in bytes. 0 means the backend's default: DefaultMemory
	// for the native and docker backends (memory bounds every kernel object charged to the
	// sandbox: see memory.go), the cluster's for kubernetes.
	Memory int64
	// Pids bounds the processes and threads of the sandbox; 0 means DefaultPids. Each
	// running command's init counts: one with the native backend's C stages (the shipped
	// build), 6 to 9 threads of a Go runtime in a binary built without cgo.
	Pids    int64
	CPUs    float64 // CPU limit in cores; 0 means none
	TmpSize int64   // size cap of /tmp and of $HOME each; 0 means DefaultTmpSize

	// Bounds on what the kernel shares machine-wide (see docs/threat-model.md).
	// Nofile is each process's open-file limit (RLIMIT_NOFILE, soft and hard): with Pids it
	// bounds the descriptors of the whole sandbox, which may be at most a quarter of the
	// host's fs.file-max. 0 means DefaultNofile, lowered to fit that quarter.
	Nofile int64
	Ptys   int64 // pseudo-terminals of the sandbox's private devpts; 0 means DefaultPtys
	Inodes int64 // inodes of each writable tmpfs (/tmp, $HOME, /dev/shm); 0 means DefaultInodes
	// Disk bounds what a copy-on-write workspace's layer may take of the host's disk
	// (writes past it fail with ENOSPC inside); 0 means DefaultDisk. It bounds nothing else:
	// a read-write workspace is the host directory itself.
	Disk int64
	// ProtectedPaths are paths of a read-write or copy-on-write workspace, relative to it,
	// that host tools run or read as configuration (an editor's tasks, direnv's .envrc):
	// those that exist when the sandbox starts are read-only inside, as the git metadata of
	// every repository in the workspace always is (see WorkspaceProtections). nil means
	// DefaultProtectedPaths; an empty list protects the git metadata alone.
	ProtectedPaths []string
	// AllowAIO permits Linux AIO (io_setup and its family), refused by default: AIO
	// contexts are machine-wide, with no per-namespace limit, so one sandbox could take
	// them all.
	AllowAIO bool

	Env      []string // explicit K=V entries added to the built environment
	CABundle []byte   // PEM bundle (system roots + airlock CA) the sandbox trusts

	Proxy ProxyHost // serves the sandbox's listener; nil means no network at all
	// ProxyOnly turns transparent egress off: the sandbox's only way out is then the proxy
	// listener (HTTP_PROXY), with no route, no redirected connections and no DNS. By
	// default a Proxy that implements TransparentHost also gets every TCP connection and
	// DNS query of the sandbox (native and Docker netns backends).
	ProxyOnly bool
	Revoker   Revoker // revokes the sandbox's credential leases on Close; may be nil

	Logger  *slog.Logger // nil means discard
	OnEvent EventFunc    // lifecycle events for audit; may be nil
	Backend Backend      // creates the sandbox (native, docker, kubernetes); required
}

// Defaults.
const (
	DefaultPids        = 1024
	DefaultTmpSize     = 256 << 20
	DefaultOutputLimit = 1 << 20
	ProxyPort          = 3128
	ExitTimeout        = 124
)

// Defaults of the bounds on host-wide kernel tables and disk (Options.Nofile and after).
const (
	DefaultNofile = 1024
	DefaultPtys   = 64
	DefaultInodes = 65536
	DefaultDisk   = 10 << 30
	// minNofile is the least open-file limit a sandbox gets: fewer breaks common tools.
	minNofile = 64
)

// withDefaults validates o and fills in defaults.
func (o Options) withDefaults() (Options, error) {
	if o.ID == "" {
		var b [6]byte
		if _, err := rand.Read(b[:]); err != nil {
			return o, fmt.Errorf("generate sandbox id: %w", err)
		}
		o.ID = "sbx-" + hex.EncodeToString(b[:])
	}
	if err := identity.CheckID(o.ID); err != nil {
		return o, err
	}
	if o.WorkspaceMode == "" {
		o.WorkspaceMode = WorkspaceRW
	}
	switch o.WorkspaceMode {
	case WorkspaceRW, WorkspaceRO, WorkspaceCoW:
	default:
		return o, fmt.Errorf("workspace mode %q: want rw, ro or cow", o.WorkspaceMode)
	}
	if o.Workspace != "" {
		abs, err := filepath.Abs(o.Workspace)
		if err != nil {
			return o, fmt.Errorf("workspace %s: %w", o.Workspace, err)
		}
		o.Workspace = abs
	}
	if o.Rootfs == "" {
		o.Rootfs = "/"
	}
	for _, p := range o.ReadOnlyPaths {
		if !filepath.IsAbs(p) {
			return o, fmt.Errorf("read-only path %q: must be absolute", p)
		}
	}
	for _, p := range o.HiddenPaths {
		if !filepath.IsAbs(p) {
			return o, fmt.Errorf("hidden path %q: must be absolute", p)
		}
	}
	if o.MaskPaths == nil {
		o.MaskPaths = DefaultMaskPaths
	}
	for _, p := range o.MaskPaths {
		if !filepath.IsAbs(p) {
			return o, fmt.Errorf("mask path %q: must be absolute", p)
		}
	}
	if o.Rootfs != "/" {
		fi, err := os.Stat(o.Rootfs)
		if err != nil {
			return o, fmt.Errorf("root file system: %w", err)
		}
		if !fi.IsDir() {
			return o, fmt.Errorf("root file system %s: not a directory", o.Rootfs)
		}
		if o.Rootfs, err = filepath.Abs(o.Rootfs); err != nil {
			return o, fmt.Errorf("root file system: %w", err)
		}
	}
	if err := checkImage(o); err != nil {
		return o, err
	}
	for _, p := range o.ProtectedPaths {
		if err := CheckProtectedPath(p); err != nil {
			return o, fmt.Errorf("protected path %w", err)
		}
	}
	if o.Timeout < 0 || o.Memory < 0 || o.Pids < 0 || !(o.CPUs >= 0) || math.IsInf(o.CPUs, 0) || o.TmpSize < 0 ||
		o.Nofile < 0 || o.Ptys < 0 || o.Inodes < 0 || o.Disk < 0 {
		return o, errors.New("sandbox limits must not be negative")
	}
	if o.Pids == 0 {
		o.Pids = DefaultPids
	}
	if o.TmpSize == 0 {
		o.TmpSize = DefaultTmpSize
	}
	var err error
	if o.Nofile, err = nofileFor(o.Nofile, o.Pids, hostFileMax()); err != nil {
		return o, err
	}
	if o.Ptys == 0 {
		o.Ptys = DefaultPtys
	}
	if o.Inodes == 0 {
		o.Inodes = DefaultInodes
	}
	if o.Disk == 0 {
		o.Disk = DefaultDisk
	}
	for _, kv := range o.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return o, fmt.Errorf("environment entry %q: want K=V", kv)
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// Command is one program to run in a sandbox.
type Command struct {
	Args        []string  // program and arguments; the program is looked up in the sandbox's PATH
	Env         []string  // extra K=V entries for this command only
	Dir         string    // working directory inside; default /workspace (or $HOME without one)
	Stdin       io.Reader // nil means empty input
	Stdout      io.Writer // streamed output; may be nil
	Stderr      io.Writer
	OutputLimit int           // bytes of each stream kept in Result; 0 means DefaultOutputLimit
	Timeout     time.Duration // overrides Options.Timeout when positive
	// TTY runs the command on a pseudo-terminal of the sandbox's own (see TTY); nil means
	// pipes. Backends without terminals refuse it (ErrNoTTY).
	TTY *TTY
}

// Result is the outcome of one Run.
type Result struct {
	ExitCode  int    // the command's status; 128+n when killed by signal n; 124 on timeout
	Signal    string // e.g. "SIGKILL" when a signal ended it
	TimedOut  bool
	Stdout    []byte // captured up to the output limit
	Stderr    []byte
	Truncated bool // some output was not captured (it was still streamed)
	Start     time.Time
	End       time.Time
	Usage     Usage
}

// Usage is what a run consumed. Zero means unknown.
type Usage struct {
	PeakMemory int64         `json:"peak_memory_bytes"`
	CPU        time.Duration `json:"cpu_ns"`
	Pids       int64         `json:"pids_peak"`
	OOMKilled  bool          `json:"oom_killed"`
}

// nofileFor resolves the open-file limit for pids processes on a host whose file table
// holds fileMax files (0: unknown): the sandbox's descriptors, nofile × pids, may take at
// most a quarter of it, so that one sandbox at its bound leaves the host and other
// sandboxes room. An unset limit is DefaultNofile, lowered to fit; a set one that does not
// fit is refused.
func nofileFor(nofile, pids, fileMax int64) (int64, error) {
	budget := fileMax / 4
	if nofile == 0 {
		nofile = DefaultNofile
		if fileMax > 0 {
			nofile = min(nofile, budget/pids)
		}
		if nofile < minNofile {
			return 0, fmt.Errorf("%d processes with at least %d open files each could take more than a quarter of the host's file table (fs.file-max %d): lower the process limit", pids, minNofile, fileMax)
		}
		return nofile, nil
	}
	if fileMax > 0 && nofile > budget/pids {
		return 0, fmt.Errorf("%d open files for each of %d processes could take more than a quarter of the host's file table (fs.file-max %d): lower the open-file or the process limit (at most %d files each)", nofile, pids, fileMax, budget/pids)
	}
	return nofile, nil
}

// hostFileMax is the host's fs.file-max, 0 when unknown.
func hostFileMax() int64 {
	b, err := os.ReadFile("/proc/sys/fs/file-max")
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return max(n, 0)
}
