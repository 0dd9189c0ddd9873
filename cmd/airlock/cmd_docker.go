package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/airlock-proxy/airlock/internal/hostfile"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
)

// runDockerInternal runs args in a sandbox container fronted by an airlock proxy that runs
// in its own container (sandbox.docker.mode: internal): no proxy runs here. The sandbox's
// container is on an internal network of its own whose only other member is the proxy's
// container, and its credential is issued, and revoked on Close, by the proxy's admin API.
func runDockerInternal(ctx context.Context, cfg *Config, o sandbox.Options, args []string, report *hostfile.Dest, log *slog.Logger, stdin io.Reader, stdout, stderr io.Writer, tty *hostTTY) error {
	dc := cfg.Sandbox.Docker
	switch {
	case cfg.Sandbox.Image == "":
		return errors.New("--backend docker needs --image (a local image; nothing is pulled)")
	case dc.ProxyContainer == "":
		return errors.New("sandbox.docker.mode internal needs sandbox.docker.proxy_container: the container the airlock proxy runs in")
	case dc.ProxyAdmin == "":
		return errors.New("sandbox.docker.mode internal needs sandbox.docker.proxy_admin: the URL of that proxy's admin API, which issues the sandbox's credential (e.g. http://127.0.0.1:9090)")
	case dc.TokenFile == "":
		return errors.New("sandbox.docker.mode internal needs sandbox.docker.token_file: a file holding an issuer token of that proxy (one of its proxy.issuers)")
	}
	rp, err := newRemoteProxy("sandbox.docker", dc.ProxyAdmin, dc.TokenFile, dc.CAFile, cfg.Home)
	if err != nil {
		return err
	}
	if o.Timeout > 0 {
		// Long enough for the command and Close, which revokes it anyway; without a
		// timeout the proxy's proxy.token_ttl applies.
		rp.issuer.TTL = o.Timeout + 10*time.Minute
	}
	b, err := dockerBackend(ctx, docker.Options{
		Image: cfg.Sandbox.Image, Mode: docker.ModeInternal, Tokens: rp.issuer,
		ProxyContainer: dc.ProxyContainer, ProxyPort: dc.ProxyPort, Runtime: dc.Runtime, Logger: log,
	})
	if err != nil {
		return err
	}
	defer b.Close()
	o.Backend = b
	o.CABundle = caBundle(rp.caPEM)
	o.Logger = log
	return runRemote(ctx, o, args, report, stdin, stdout, stderr, tty)
}

// dockerBackend connects to the Docker daemon and removes what sandboxes of earlier,
// no longer running airlock processes left behind.
func dockerBackend(ctx context.Context, o docker.Options) (*docker.Backend, error) {
	b, err := docker.New(o)
	if err != nil {
		return nil, fmt.Errorf("docker backend: %w", err)
	}
	if _, err := b.RemoveLeftovers(ctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("remove leftovers of earlier sandboxes: %w", err)
	}
	return b, nil
}
