package docker

import (
	"context"
	"errors"
	"fmt"
	"github.com/airlock-proxy/airlock/internal/procstat"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"

	"github.com/airlock-proxy/airlock/sandbox"
)

// OwnerLabel names the airlock process that created a container or network:
// "HOST/PID/START" (START is the process's start time in clock ticks since boot).
const OwnerLabel = "org.airlock-proxy.owner"

// owner is this process's OwnerLabel value.
func owner() string {
	h, _ := os.Hostname()
	pid := os.Getpid()
	return fmt.Sprintf("%s/%d/%d", h, pid, procstat.StartTime(pid))
}

// ownerGone reports whether the owner named by v is a process of this host that no
// longer runs. Owners of other hosts are never judged gone.
func ownerGone(v string) bool {
	parts := strings.Split(v, "/")
	h, _ := os.Hostname()
	if len(parts) != 3 || parts[0] != h {
		return false
	}
	pid, err1 := strconv.Atoi(parts[1])
	start, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	return procstat.StartTime(pid) != start
}

// RemoveLeftovers removes the containers, networks and state directories of sandboxes
// whose airlock process on this host died without closing them. It returns how many
// sandboxes it cleaned.
func (b *Backend) RemoveLeftovers(ctx context.Context) (int, error) {
	f := filters.NewArgs(filters.Arg("label", Label), filters.Arg("label", OwnerLabel))
	cs, err := b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return 0, fmt.Errorf("list sandbox containers: %w", err)
	}
	var errs []error
	n := 0
	for _, c := range cs {
		if !ownerGone(b.ownerOf(c.Labels[Label], c.Labels)) {
			continue
		}
		err := b.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove container %s: %w", c.ID[:12], err))
			continue
		}
		n++
		if id := c.Labels[Label]; id != "" && !strings.ContainsAny(id, "/.") {
			if unmountPts(filepath.Join(b.opts.StateDir, id)) == nil {
				_ = os.RemoveAll(filepath.Join(b.opts.StateDir, id))
				// Its uid range, however young: its container is gone.
				if release := sandbox.ReclaimUIDRange(id, b.opts.StateDir); release != nil {
					release()
				}
			}
		}
	}
	// The uid ranges of sandboxes whose state directory is gone (removed above, or by
	// their own Close).
	sandbox.FreeUIDRanges(b.opts.StateDir)
	ns, err := b.cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		return n, errors.Join(append(errs, fmt.Errorf("list sandbox networks: %w", err))...)
	}
	for _, nw := range ns {
		if !ownerGone(nw.Labels[OwnerLabel]) {
			continue
		}
		if b.opts.ProxyContainer != "" {
			_ = b.cli.NetworkDisconnect(ctx, nw.ID, b.opts.ProxyContainer, true)
		}
		if err := b.cli.NetworkRemove(ctx, nw.ID); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove network %s: %w", nw.Name, err))
		}
	}
	return n, errors.Join(errs...)
}
