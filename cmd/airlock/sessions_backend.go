package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"
	"k8s.io/client-go/rest"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
	"github.com/airlock-proxy/airlock/sandbox/kubernetes"
)

// sessionBackends serves the backends of sandbox sessions: the native one, Docker
// containers of local images through the daemon of the proxy's host (mode netns: the
// proxy's listener inside the container's network namespace, so root beside the daemon),
// and pods of the cluster the proxy runs in (sandbox.kubernetes.*; their credentials
// issued by this proxy).
type sessionBackends struct {
	native  sandbox.Backend
	runtime string // sandbox.docker.runtime
	log     *slog.Logger
	kube    KubernetesConfig
	tokens  kubernetes.TokenIssuer // this proxy
	// connect reaches the cluster (kubernetes.Connect when nil); execer runs commands in
	// pods (nil: pods/exec over the REST config).
	connect func(kubeconfig string) (kubernetes.Client, *rest.Config, error)
	execer  kubernetes.Execer

	mu       sync.Mutex
	cli      *client.Client
	backends map[string]*docker.Backend // by image
	kclient  kubernetes.Client
	krest    *rest.Config
	kbs      map[string]*kubernetes.Backend // by image
}

// backend is session.Options.Backend.
func (sb *sessionBackends) backend(ctx context.Context, name, image string) (sandbox.Backend, error) {
	switch name {
	case "native":
		return sb.native, nil
	case "docker":
		return sb.docker(ctx, image)
	case "kubernetes":
		return sb.kubernetes(image)
	}
	return nil, fmt.Errorf("backend %q is not served here; want native, docker or kubernetes", name)
}

// kubernetes is the backend of pods of image, in sandbox.kubernetes.namespace, whose
// only egress is this proxy's Service (sandbox.kubernetes.proxy_service, default
// airlock/airlock).
func (sb *sessionBackends) kubernetes(image string) (*kubernetes.Backend, error) {
	if image == "" {
		return nil, errors.New("a kubernetes sandbox needs an image (the pod's image, pulled by the cluster)")
	}
	if sb.kube.InitImage == "" {
		return nil, errNoInitImage
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if b := sb.kbs[image]; b != nil {
		return b, nil
	}
	if sb.kclient == nil {
		connect := sb.connect
		if connect == nil {
			connect = kubernetes.Connect
		}
		c, rc, err := connect(sb.kube.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("this airlock reaches no Kubernetes cluster (sandbox.kubernetes.kubeconfig, $KUBECONFIG, ~/.kube/config, or its pod's service account): %w", err)
		}
		sb.kclient, sb.krest = c, rc
	}
	b, err := kubernetes.New(kubernetes.Options{
		Client: sb.kclient, RESTConfig: sb.krest, Execer: sb.execer, Namespace: sb.kube.Namespace, Image: image,
		InitImage: sb.kube.InitImage, ConfinementProbe: sb.kube.ConfinementProbe,
		ProxyService: cmp.Or(sb.kube.ProxyService, "airlock"), ProxyNamespace: cmp.Or(sb.kube.ProxyNamespace, "airlock"),
		ProxyPort: sb.kube.ProxyPort, Tokens: sb.tokens, RuntimeClassName: sb.kube.RuntimeClass, Logger: sb.log,
	})
	if err != nil {
		return nil, err
	}
	if sb.kbs == nil {
		sb.kbs = map[string]*kubernetes.Backend{}
	}
	sb.kbs[image] = b
	return b, nil
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

// removeDockerLeftovers removes the sandbox containers (and their state) of airlock
// processes of this host that died and whose sessions no airlock took over (Adopt runs
// first): nothing is left running that no airlock watches. A host without a Docker daemon
// has none.
func (sb *sessionBackends) removeDockerLeftovers(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cli, err := sb.client(ctx)
	if err != nil {
		return 0, nil
	}
	// RemoveLeftovers looks at labels, never at the image a backend is for.
	b, err := docker.New(docker.Options{Image: "leftovers", Client: cli, Mode: docker.ModeNetNS, Logger: sb.log})
	if err != nil {
		return 0, err
	}
	return b.RemoveLeftovers(ctx)
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
