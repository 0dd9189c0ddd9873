package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
)

// sessionBackends serves the backends of sandbox sessions: the native one, and Docker
// containers of local images through the daemon of the proxy's host (mode netns: the
// proxy's listener inside the container's network namespace, so root beside the daemon).
type sessionBackends struct {
	native  sandbox.Backend
	runtime string // sandbox.docker.runtime
	log     *slog.Logger

	mu       sync.Mutex
	cli      *client.Client
	cliErr   error
	backends map[string]*docker.Backend // by image
}

// backend is session.Options.Backend.
func (sb *sessionBackends) backend(ctx context.Context, name, image string) (sandbox.Backend, error) {
	switch name {
	case "native":
		return sb.native, nil
	case "docker":
		return sb.docker(ctx, image)
	}
	return nil, fmt.Errorf("backend %q is not served here; want native or docker", name)
}

func (sb *sessionBackends) docker(ctx context.Context, image string) (*docker.Backend, error) {
	if image == "" {
		return nil, errors.New("a docker sandbox needs an image (a local image of the airlock host's Docker daemon; nothing is pulled)")
	}
	cli, err := sb.client(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := cli.ImageInspect(ctx, image); err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("image %q is not on the airlock host's Docker daemon, and nothing is pulled: build or load it there first", image)
		}
		return nil, fmt.Errorf("image %q: %w", image, err)
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if b := sb.backends[image]; b != nil {
		return b, nil
	}
	b, err := docker.New(docker.Options{Image: image, Client: cli, Mode: docker.ModeNetNS, Runtime: sb.runtime, Logger: sb.log})
	if err != nil {
		return nil, err
	}
	if sb.backends == nil {
		sb.backends = map[string]*docker.Backend{}
	}
	sb.backends[image] = b
	return b, nil
}

// client connects to the daemon once; a daemon that does not answer is refused clearly
// (and asked again by the next create).
func (sb *sessionBackends) client(ctx context.Context) (*client.Client, error) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.cli == nil {
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return nil, fmt.Errorf("this airlock has no Docker daemon to run docker sandboxes: %w", err)
		}
		sb.cli = cli
	}
	if _, err := sb.cli.Ping(ctx); err != nil {
		return nil, fmt.Errorf("this airlock has no Docker daemon to run docker sandboxes (%s does not answer): %w", sb.cli.DaemonHost(), err)
	}
	return sb.cli, nil
}

// close releases the daemon connection.
func (sb *sessionBackends) close(context.Context) error {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.cli != nil {
		return sb.cli.Close()
	}
	return nil
}
