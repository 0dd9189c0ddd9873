package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/airlock-proxy/airlock/sandbox"
)

var _ sandbox.Adopter = (*Backend)(nil)

// adoptedFile, in a sandbox's state directory, names the airlock process that took the
// sandbox over (its OwnerLabel value): a container's labels cannot change, and
// RemoveLeftovers must not remove a sandbox whose first owner died but whose adopter
// lives.
const adoptedFile = "owner"

// Adopt takes over the running container of sandbox o.ID that an earlier airlock process
// on this host created and left when it died (mode netns: the proxy's listener is opened
// again inside the container's network namespace; the container, its processes, /tmp and
// $HOME are as they were). A sandbox of a live airlock is refused and left alone; one that
// cannot be taken over (its container stopped, mode internal, whose credential was the old
// process's) is removed, with its state directory and uid range.
func (b *Backend) Adopt(ctx context.Context, o sandbox.Options) (sandbox.Instance, error) {
	if o.ID == "" || strings.ContainsAny(o.ID, "/.") {
		return nil, fmt.Errorf("adopt: invalid sandbox id %q", o.ID)
	}
	in := &instance{b: b, opts: o, dir: filepath.Join(b.opts.StateDir, o.ID), ownsDir: true}
	f := filters.NewArgs(filters.Arg("label", Label+"="+o.ID), filters.Arg("label", OwnerLabel))
	cs, err := b.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("list sandbox containers: %w", err)
	}
	if len(cs) != 1 {
		return nil, errors.Join(fmt.Errorf("want one container of sandbox %s, found %d", o.ID, len(cs)), in.abandon(ctx, cs))
	}
	if owner := b.ownerOf(o.ID, cs[0].Labels); !ownerGone(owner) {
		return nil, fmt.Errorf("sandbox %s belongs to a running airlock (%s)", o.ID, owner)
	}
	in.id = cs[0].ID
	if err := in.takeOver(ctx); err != nil {
		return nil, errors.Join(err, in.Close(context.WithoutCancel(ctx)))
	}
	b.opts.Logger.Info("sandbox container taken over", "sandbox", o.ID, "container", in.id[:12])
	return in, nil
}

// takeOver checks the container and attaches to it.
func (in *instance) takeOver(ctx context.Context) error {
	b := in.b
	in.freeUIDs = sandbox.ReclaimUIDRange(in.opts.ID, b.opts.StateDir)
	st, err := b.cli.ContainerInspect(ctx, in.id)
	switch {
	case err != nil:
		return fmt.Errorf("inspect container: %w", err)
	case st.State == nil || !st.State.Running:
		return fmt.Errorf("its container %s is not running", in.id[:12])
	case st.Config == nil || st.Config.Image != b.opts.Image:
		return fmt.Errorf("its container %s does not run image %s", in.id[:12], b.opts.Image)
	case b.mode != ModeNetNS:
		return errors.New("only a sandbox of mode netns can be taken over: an internal-mode sandbox's proxy credential was its old airlock's")
	}
	in.user, in.pid = st.Config.User, st.State.Pid
	if _, err := os.Stat(in.dir); err != nil {
		return fmt.Errorf("its state directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(in.dir, adoptedFile), []byte(b.owner), 0o600); err != nil {
		return fmt.Errorf("record the new owner: %w", err)
	}
	if in.opts.Proxy != nil {
		return in.attachProxy()
	}
	return nil
}

// abandon removes what is left of a sandbox that cannot be taken over.
func (in *instance) abandon(ctx context.Context, cs []container.Summary) error {
	var errs []error
	for _, c := range cs {
		if !ownerGone(in.b.ownerOf(in.opts.ID, c.Labels)) {
			return fmt.Errorf("a container of sandbox %s belongs to a running airlock: left alone", in.opts.ID)
		}
	}
	for _, c := range cs {
		errs = append(errs, in.b.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true}))
	}
	in.freeUIDs = sandbox.ReclaimUIDRange(in.opts.ID, in.b.opts.StateDir)
	return errors.Join(append(errs, in.Close(context.WithoutCancel(ctx)))...)
}

// ownerOf is the airlock process that holds sandbox id's container: the one that took it
// over, if any, else the one that created it.
func (b *Backend) ownerOf(id string, labels map[string]string) string {
	if id != "" && !strings.ContainsAny(id, "/.") {
		if o, err := os.ReadFile(filepath.Join(b.opts.StateDir, id, adoptedFile)); err == nil {
			return strings.TrimSpace(string(o))
		}
	}
	return labels[OwnerLabel]
}
