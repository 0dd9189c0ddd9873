package native

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-proxy/airlock/internal/procstat"
	"github.com/airlock-proxy/airlock/sandbox"

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
	if !in.ownsDir {
		// A failed Create whose directory is another sandbox's of the same id: it made
		// nothing, and none of that sandbox's mounts, files or uid range is its own.
		return nil
	}
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
	in.warm.end()
	var cgErr error
	if in.cg != nil {
		cgErr = in.cg.remove()
	}
	if in.opts.WorkspaceMode == sandbox.WorkspaceCoW && in.opts.Workspace != "" {
		in.changes, in.changesErr = listChanges(in.upperDir(), in.opts.Workspace, in.opts.ProtectedPathsOrDefault())
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
		if in.releaseUIDs != nil {
			in.releaseUIDs()
		}
	}
	in.closeErr = errors.Join(errs...)
	return in.closeErr
}

// Changes lists what the sandbox changed in a copy-on-write workspace (nil in other modes);
// its error wraps ErrChangesIncomplete when the list may lack changes.
func (in *nativeInstance) Changes() ([]sandbox.Change, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.opts.WorkspaceMode != sandbox.WorkspaceCoW || in.opts.Workspace == "" {
		return nil, nil
	}
	if in.closed {
		return in.changes, in.changesErr
	}
	return listChanges(in.upperDir(), in.opts.Workspace, in.opts.ProtectedPathsOrDefault())
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
	if in.opts.WorkspaceMode != sandbox.WorkspaceCoW || in.opts.Workspace == "" {
		return errors.New("patch: workspace is not copy-on-write")
	}
	if in.closed {
		return sandbox.ErrClosed
	}
	return writePatch(w, in.upperDir(), in.opts.Workspace, in.opts.ProtectedPathsOrDefault())
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
	state := n.stateDir()
	if state == "" {
		return nil // rootless with no home: no sandbox could have been made
	}
	var errs []error
	if rootless() && exists(filepath.Join(state, "sandboxes")) {
		// What is listed there is removed: only from a directory no one else can swap.
		if err := CheckPrivateDir(filepath.Join(state, "sandboxes")); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(filepath.Join(state, "sandboxes"))
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read sandboxes: %w", err)
	}
	var deleg *delegation
	if rootless() && len(entries) > 0 {
		deleg, _ = findDelegation(n.cgroupParent(), n.cgroupRoot()) // Create says what is wrong with it
	}
	for _, e := range entries {
		dir := filepath.Join(state, "sandboxes", e.Name())
		if ownerAlive(dir) || justCreated(dir) {
			continue
		}
		// Cgroups first (which kills what still runs in them), then the state that names
		// them; a sandbox whose cgroups stay keeps its state for the next Cleanup.
		if rootless() { // no disk, no uid range: the directory and a delegated cgroup
			if deleg != nil {
				if cg := filepath.Join(deleg.parent, e.Name()); exists(cg) {
					if err := (&cgroups{unified: cg}).remove(); err != nil {
						errs = append(errs, err)
						continue
					}
				}
			}
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
			}
			continue
		}
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
	if rootless() {
		return errors.Join(errs...)
	}
	sandbox.FreeUIDRangesFunc(state, func(id string) string { return filepath.Join(state, "sandboxes", id) })
	return errors.Join(errs...)
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

// writeOwner records in dir which process (pid and start time) made the sandbox, which
// ownerAlive reads to tell a live owner from a dead one.
func writeOwner(dir string) error {
	b := []byte(strconv.Itoa(os.Getpid()) + " " + strconv.FormatUint(procstat.StartTime(os.Getpid()), 10))
	if err := os.WriteFile(filepath.Join(dir, "owner"), b, 0o600); err != nil {
		return fmt.Errorf("write owner: %w", err)
	}
	return nil
}
