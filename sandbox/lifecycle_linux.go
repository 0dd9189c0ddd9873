package sandbox

import (
	"context"
	"errors"
	"fmt"
	"github.com/airlock-proxy/airlock/internal/procstat"
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
	if in.cg != nil {
		errs = append(errs, in.cg.remove())
	}
	if in.opts.WorkspaceMode == WorkspaceCoW && in.opts.Workspace != "" {
		ch, err := changesOf(filepath.Join(in.dir, "upper"), in.opts.Workspace)
		in.changes = ch
		errs = append(errs, err)
	}
	if err := os.RemoveAll(in.dir); err != nil {
		errs = append(errs, fmt.Errorf("remove sandbox directory: %w", err))
	}
	if in.slot != "" {
		_ = os.Remove(in.slot)
	}
	in.closeErr = errors.Join(errs...)
	return in.closeErr
}

// Changes lists what the sandbox changed in a copy-on-write workspace (nil in other modes).
func (in *nativeInstance) Changes() ([]Change, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.opts.WorkspaceMode != WorkspaceCoW || in.opts.Workspace == "" {
		return nil, nil
	}
	if in.closed {
		return in.changes, nil
	}
	return changesOf(filepath.Join(in.dir, "upper"), in.opts.Workspace)
}

// Patch is a unified diff from the host workspace to the sandbox's copy-on-write view.
func (in *nativeInstance) Patch() ([]byte, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.opts.WorkspaceMode != WorkspaceCoW || in.opts.Workspace == "" {
		return nil, errors.New("patch: workspace is not copy-on-write")
	}
	if in.closed {
		return nil, errClosed
	}
	return patchOf(filepath.Join(in.dir, "upper"), in.opts.Workspace)
}

// allocateSlot reserves a host uid range for a sandbox: slot N owns the 65536 host ids from
// 100000+N*65536. The slot file holds the sandbox id and disappears on Close or Cleanup.
func allocateSlot(dir, id string) (string, int, error) {
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
		_, err = f.WriteString(id)
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
// behind: their processes, cgroups, state directories and uid slots.
func (n *Native) Cleanup(ctx context.Context) error {
	state := n.stateDir()
	var errs []error
	live := map[string]bool{}
	entries, err := os.ReadDir(filepath.Join(state, "sandboxes"))
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read sandboxes: %w", err)
	}
	for _, e := range entries {
		dir := filepath.Join(state, "sandboxes", e.Name())
		if ownerAlive(dir) || justCreated(dir) {
			live[e.Name()] = true
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
		}
	}
	errs = append(errs, n.cleanupCgroups(ctx, live))
	slots, _ := os.ReadDir(filepath.Join(state, "slots"))
	for _, s := range slots {
		path := filepath.Join(state, "slots", s.Name())
		id, err := os.ReadFile(path)
		if err == nil && live[string(id)] {
			continue
		}
		_ = os.Remove(path)
	}
	return errors.Join(errs...)
}

func (n *Native) cleanupCgroups(ctx context.Context, live map[string]bool) error {
	h := probeCgroups(n.cgroupRoot())
	var dirs []string
	if h.unified != "" {
		dirs = append(dirs, filepath.Join(h.unified, cgroupPrefix))
	}
	for _, c := range []string{"memory", "pids", "cpu"} {
		if d := h.v1Dir(c); d != "" {
			dirs = append(dirs, filepath.Join(d, cgroupPrefix))
		}
	}
	var errs []error
	for _, parent := range dirs {
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			if !e.IsDir() || live[e.Name()] || ctx.Err() != nil {
				continue
			}
			cg := &cgroups{}
			dir := filepath.Join(parent, e.Name())
			if parent == filepath.Join(h.unified, cgroupPrefix) {
				cg.unified = dir
			} else {
				cg.v1 = map[string]string{"x": dir}
			}
			errs = append(errs, cg.remove())
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
