package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/network"

	"github.com/airlock-proxy/airlock/sandbox"
)

// createNetwork makes the sandbox's own internal network (no route off it, no address of
// the host on it) and connects the proxy's container to it.
func (in *instance) createNetwork(ctx context.Context) error {
	name := containerName(in.opts.ID)
	internal := true
	_, err := in.b.cli.NetworkCreate(ctx, name, network.CreateOptions{
		Driver:   "bridge",
		Internal: internal,
		Labels:   map[string]string{Label: in.opts.ID, OwnerLabel: in.b.owner},
		Options: map[string]string{
			"com.docker.network.bridge.enable_icc":           "true",
			"com.docker.network.bridge.enable_ip_masquerade": "false",
			// An internal network stops forwarding, not the host itself: with the
			// gateway address on the host's bridge, a container reaches every host service
			// listening on all addresses (seen on the 20.10 engine, TCP and UDP to the
			// host's own address). Without an address on the bridge the host is not a
			// neighbour at all; the sandbox still reaches the proxy's container on the
			// same bridge.
			"com.docker.network.bridge.inhibit_ipv4": "true",
		},
	})
	if err != nil {
		if cerrdefs.IsConflict(err) {
			return fmt.Errorf("sandbox %s %w (network %s)", in.opts.ID, sandbox.ErrExists, name)
		}
		return fmt.Errorf("create network: %w", err)
	}
	in.network = name
	if err := in.b.cli.NetworkConnect(ctx, name, in.b.opts.ProxyContainer, &network.EndpointSettings{}); err != nil {
		return fmt.Errorf("connect proxy container %s to %s: %w", in.b.opts.ProxyContainer, name, err)
	}
	in.joined = true
	pc, err := in.b.cli.ContainerInspect(ctx, in.b.opts.ProxyContainer)
	if err != nil {
		return fmt.Errorf("inspect proxy container: %w", err)
	}
	if pc.NetworkSettings == nil || pc.NetworkSettings.Networks[name] == nil || pc.NetworkSettings.Networks[name].IPAddress == "" {
		return fmt.Errorf("proxy container %s has no address on %s", in.b.opts.ProxyContainer, name)
	}
	in.proxyAddr = net.JoinHostPort(pc.NetworkSettings.Networks[name].IPAddress, strconv.Itoa(in.b.opts.ProxyPort))
	return nil
}

// removeNetwork disconnects the proxy and removes the sandbox's network.
func (in *instance) removeNetwork(ctx context.Context) error {
	var errs []error
	if in.joined {
		err := in.b.cli.NetworkDisconnect(ctx, in.network, in.b.opts.ProxyContainer, true)
		if err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("disconnect proxy container: %w", err))
		}
	}
	if err := in.b.cli.NetworkRemove(ctx, in.network); err != nil && !cerrdefs.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("remove network %s: %w", in.network, err))
	}
	return errors.Join(errs...)
}
