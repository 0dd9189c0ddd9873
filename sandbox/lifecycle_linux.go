package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/airlock-proxy/airlock/internal/procstat"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Close destroys the sandbox: detaches its listeners, kills every process, removes its
// cgroups and state (the mounts and network namespace go with its last process). It is
// idempotent.
func (in *nativeInstance) Close(ctx context.Context) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return in.closeErr
	}
	in.closed = true
	var errs []error
	for _, d := range in.detach {
		d()
	}
	in.detach = nil
	if in.ctrl != nil {
		_ = unix.Shutdown(int(in.ctrl.Fd()), unix.SHUT_RDWR)
	}
	if in.holder != nil {
		_ = in.holder.Process.Kill()
		select {
		case <-in.waitErr:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("wait for sandbox to end: %w", ctx.Err()))
		}
	}
	// A Run racing this Close may be about to send on the control socket: close it under
	// ctrlMu so that Run sees nil rather than a descriptor number the kernel may reuse.
	in.ctrlMu.Lock()
	if in.ctrl != nil {
		in.ctrl.Close()
		in.ctrl = nil
	}
	in.ctrlMu.Unlock()
	var cgErr error
	if in.cg != nil {
		cgErr = in.cg.remove()
	}
	if in.opts.WorkspaceMode == WorkspaceCoW && in.opts.Workspace != "" {
		in.changes, in.changesErr = listChanges(in.upperDir(), in.opts.Workspace, in.opts.protectedPaths())
	}
	if err := unmountScratch(in.dir); err != nil {
		errs = append(errs, err)
	}
	if cgErr != nil {
		// Processes may outlive a cgroup that could not be removed: keep the state
		// directory, through which a later Cleanup finds the cgroups again, and the uid
		// range, so that no other sandbox gets those ids meanwhile.
		errs = append(errs, fmt.Errorf("%w (sandbox %s kept for a later cleanup)", cgErr, in.opts.ID))
	} else {
		if err := os.RemoveAll(in.dir); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox directory: %w", err))
		}
		if in.slot != "" {
			_ = os.Remove(in.slot)
		}
	}
	in.closeErr = errors.Join(errs...)
	return in.closeErr
}

// Changes lists what the sandbox changed in a copy-on-write workspace (nil in other modes);
// its error wraps ErrChangesIncomplete when the list may lack changes.
func (in *nativeInstance) Changes() ([]Change, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.opts.WorkspaceMode != WorkspaceCoW || in.opts.Workspace == "" {
		return nil, nil
	}
	if in.closed {
		return in.changes, in.changesErr
	}
	return listChanges(in.upperDir(), in.opts.Workspace, in.opts.protectedPaths())
}

// Patch is a unified diff from the host workspace to the sandbox's copy-on-write view.
func (in *nativeInstance) Patch() ([]byte, error) {
	var b bytes.Buffer
	err := in.WritePatch(&b)
	return b.Bytes(), err
}

// WritePatch writes the patch to w, one file at a time.
func (in *nativeInstance) WritePatch(w io.Writer) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.opts.WorkspaceMode != WorkspaceCoW || in.opts.Workspace == "" {
		return errors.New("patch: workspace is not copy-on-write")
	}
	if in.closed {
		return ErrClosed
	}
	return writePatch(w, in.upperDir(), in.opts.Workspace, in.opts.protectedPaths())
}

// allocateSlot reserves a host uid range for a sandbox: slot N owns the 65536 host ids from
// 100000+N*65536. The slot file holds the sandbox id and the state directory it belongs to,
// and disappears on Close or on that state directory's Cleanup.
func allocateSlot(dir, id, state string) (string, int, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", 0, fmt.Errorf("create slot directory: %w", err)
	}
	start := rand.IntN(uidSlots)
	for i := 0; i < uidSlots; i++ {
		n := (start+i)%uidSlots + 1
		path := filepath.Join(dir, strconv.Itoa(n))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if os.IsExist(err) {
			continue
		}
		if err != nil {
			return "", 0, fmt.Errorf("reserve uid range: %w", err)
		}
		_, err = f.WriteString(id + "\n" + filepath.Clean(state) + "\n")
		f.Close()
		if err != nil {
			os.Remove(path)
			return "", 0, fmt.Errorf("reserve uid range: %w", err)
		}
		return path, uidRangeBase + n*uidRangeSize, nil
	}
	return "", 0, errors.New("reserve uid range: all slots in use")
}

// ownerAlive reports whether the process recorded in a sandbox directory still runs.
func ownerAlive(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "owner"))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return false
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	return procstat.StartTime(pid) == start && start != 0
}

// Cleanup removes what sandboxes of earlier, no longer running airlock processes left
// behind: their processes, cgroups, state directories and uid slots. It touches only
// sandboxes recorded in this Native's state directory: cgroups are shared by the whole
// machine, and another airlock (or a harness with its own StateDir) may have live
// sandboxes there. A sandbox's state directory exists before its cgroups are made and is
// removed after they are, so a crashed sandbox always leaves one to find it by.
func (n *Native) Cleanup(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return ErrNeedsRoot
	}
	state := n.stateDir()
	var errs []error
	entries, err := os.ReadDir(filepath.Join(state, "sandboxes"))
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read sandboxes: %w", err)
	}
	for _, e := range entries {
		dir := filepath.Join(state, "sandboxes", e.Name())
		if ownerAlive(dir) || justCreated(dir) {
			continue
		}
		// Cgroups first (which kills what still runs in them), then the state that names
		// them; a sandbox whose cgroups stay keeps its state for the next Cleanup.
		if err := n.cleanupCgroups(ctx, e.Name()); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := unmountScratch(dir); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", dir, err))
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
		}
	}
	freeSlots(state, func(id string) string { return filepath.Join(state, "sandboxes", id) })
	return errors.Join(errs...)
}

// freeSlots frees the uid slots reserved under owner (a state directory) whose sandbox has
// no directory (dirOf(id)) left. A slot younger than a minute may belong to a sandbox being
// created right now (its directory not yet made, or the slot file not yet written): it
// stays.
func freeSlots(owner string, dirOf func(id string) string) {
	slots, _ := os.ReadDir(SlotDir)
	for _, s := range slots {
		path := filepath.Join(SlotDir, s.Name())
		b, err := os.ReadFile(path)
		if err != nil || justCreated(path) {
			continue
		}
		id, o, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if o == "" {
			o = DefaultStateDir // written before slots named their state directory
		}
		if o != filepath.Clean(owner) || id == "" || strings.ContainsAny(id, "/") || exists(dirOf(id)) {
			continue // another airlock's, or its sandbox is alive or not yet cleaned up
		}
		_ = os.Remove(path)
	}
}

// ReserveUIDRange reserves a host uid range of its own for a sandbox of another backend,
// machine-wide, as native sandboxes' are (SlotDir): the sandbox's processes then run as
// uids of no other sandbox and of no user of the host, and what the kernel counts per user
// (inotify, queued signals...) is theirs alone. base is the range's first uid; owner is the
// backend's state directory, where owner/id exists while the sandbox lives (FreeUIDRanges
// frees the others). release frees the range.
func ReserveUIDRange(id, owner string) (base int, release func(), err error) {
	path, base, err := allocateSlot(SlotDir, id, owner)
	if err != nil {
		return 0, nil, err
	}
	return base, func() { _ = os.Remove(path) }, nil
}

// FreeUIDRanges frees the ranges ReserveUIDRange reserved under owner whose sandbox has no
// directory owner/id left (its airlock died without closing it).
func FreeUIDRanges(owner string) {
	freeSlots(owner, func(id string) string { return filepath.Join(owner, id) })
}

// cleanupCgroups removes the cgroups of the stale sandbox id, in every hierarchy.
func (n *Native) cleanupCgroups(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	h := probeCgroups(n.cgroupRoot())
	var errs []error
	if h.unified != "" {
		if dir := filepath.Join(h.unified, cgroupPrefix, id); exists(dir) {
			errs = append(errs, (&cgroups{unified: dir}).remove())
		}
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		if d := h.v1Dir(c); d != "" {
			if dir := filepath.Join(d, cgroupPrefix, id); exists(dir) {
				errs = append(errs, (&cgroups{v1: map[string]string{c: dir}}).remove())
			}
		}
	}
	return errors.Join(errs...)
}

// justCreated spares a directory another process is still setting up (no owner file yet).
func justCreated(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, "owner")); err == nil {
		return false
	}
	fi, err := os.Stat(dir)
	return err == nil && time.Since(fi.ModTime()) < time.Minute
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
