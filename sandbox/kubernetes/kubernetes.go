// Package kubernetes is a sandbox.Backend that runs each sandbox as a Pod, for when one
// machine is not enough.
//
// Per sandbox it creates, in one namespace:
//
//   - a Secret holding the sandbox's proxy URL with its per-sandbox proxy credential (and
//     the CA bundle), deleted on Close, when the credential is also revoked;
//   - a NetworkPolicy selecting only that Pod: no ingress, and egress only to the airlock
//     proxy's pods on the proxy port (not even DNS: the proxy is addressed by its Service's
//     cluster IP);
//   - a Pod with no service-account token, no service links, a non-root user, a read-only
//     root file system with memory-backed sized /tmp and $HOME, every capability dropped,
//     no privilege escalation, the RuntimeDefault seccomp profile, CPU/memory limits and an
//     optional runtimeClassName (gvisor, kata).
//
// Before the pod's own container starts, an init container of airlock's image
// (Options.InitImage) checks from inside the pod that the proxy answers and that the API
// server does not: network plugins program a new pod's policy some time after it starts,
// and no command may run in that window (CheckConfinement).
//
// Commands run through the API's exec subresource (remotecommand); logs through the log
// subresource. The image needs /bin/sh and env: a command is started as
// `sh -c 'cd "$0" && exec env K=V... "$@"' DIR ARGS...` so that it gets the environment the
// sandbox module builds, while the proxy variables come from the Secret and never appear in
// an exec request.
package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"k8s.io/client-go/rest"

	"github.com/airlock-proxy/airlock/sandbox"
)

// TokenIssuer issues and revokes per-sandbox proxy credentials. With an in-cluster proxy
// Deployment that is *admin.Client, talking to the proxy's admin API; the replicas must
// share signed credentials (proxy.token_key_file) so that every one accepts them. Errors
// end the Create (issue) or are reported by Close (revoke).
type TokenIssuer interface {
	IssueToken(ctx context.Context, id sandbox.Identity) (string, error)
	RevokeToken(ctx context.Context, sandboxID string) error
}

// Execer runs a command in a container of a pod and returns its exit status. The default
// uses the API's exec subresource over RESTConfig.
type Execer interface {
	Exec(ctx context.Context, e Exec) (exitCode int, err error)
}

// Exec is one command for an Execer.
type Exec struct {
	Namespace, Pod, Container string
	Command                   []string
	Stdin                     io.Reader // nil means none
	Stdout, Stderr            io.Writer
}

// Options configure the Kubernetes backend.
type Options struct {
	Client     Client       // required; Connect or NewClient
	RESTConfig *rest.Config // for exec; required unless Execer is set
	Execer     Execer       // nil means remotecommand over RESTConfig

	Namespace string // where sandboxes run; default DefaultNamespace
	Image     string // required

	// InitImage is airlock's own image (required): the pod's init container runs
	// `airlock sandbox confinement-check` from it, so that no command runs in the pod before
	// its NetworkPolicy is in force (see CheckConfinement).
	InitImage string
	// ConfinementProbe is the host:port the check expects the policy to refuse; empty means
	// the API server's Service (in every pod's environment), ConfinementProbeNone only
	// waits for the proxy to answer.
	ConfinementProbe string

	// The airlock proxy: its Service (whose cluster IP goes in HTTP_PROXY), the namespace
	// of the Service and pods (default Namespace), the labels of its pods (the only
	// egress peer; default DefaultProxySelector) and its port (default sandbox.ProxyPort).
	ProxyService   string
	ProxyNamespace string
	ProxySelector  map[string]string
	ProxyPort      int
	Tokens         TokenIssuer // required

	RuntimeClassName string   // optional, e.g. "gvisor" or "kata"
	User             int64    // uid and gid; default DefaultUser; never 0
	Idle             []string // keeps the pod alive; default ["sleep", "infinity"]
	// WorkspaceClaim is a PersistentVolumeClaim mounted at /workspace (read-only for
	// WorkspaceRO). Host directories (sandbox.Options.Workspace) do not exist on a cluster's
	// nodes and are refused.
	WorkspaceClaim string
	// StartTimeout bounds waiting for the pod to run; default DefaultStartTimeout.
	StartTimeout time.Duration
	Logger       *slog.Logger // nil means discard
}

// Defaults.
const (
	DefaultNamespace    = "airlock-sandboxes"
	DefaultUser         = 1000
	DefaultStartTimeout = 2 * time.Minute
	// LabelSandbox is on every object the backend creates; its value is the sandbox id.
	LabelSandbox  = "airlock-proxy.org/sandbox"
	containerName = "sandbox"
)

// DefaultProxySelector returns the labels of the proxy's pods in deploy/kubernetes.
func DefaultProxySelector() map[string]string {
	return map[string]string{"app.kubernetes.io/name": "airlock", "app.kubernetes.io/component": "proxy"}
}

// Backend creates sandbox pods. It is safe for concurrent use.
type Backend struct{ opts Options }

var _ sandbox.Backend = (*Backend)(nil)

// New checks o and fills in defaults.
func New(o Options) (*Backend, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("kubernetes backend: client is required")
	case o.Image == "":
		return nil, errors.New("kubernetes backend: image is required")
	case o.InitImage == "":
		return nil, errors.New("kubernetes backend: init image is required: airlock's own image, whose init container holds the pod until its NetworkPolicy is in force")
	case o.ProxyService == "":
		return nil, errors.New("kubernetes backend: proxy service is required")
	case o.Tokens == nil:
		return nil, errors.New("kubernetes backend: token issuer is required")
	case o.RESTConfig == nil && o.Execer == nil:
		return nil, errors.New("kubernetes backend: REST config (for exec) is required")
	case o.User < 0:
		return nil, fmt.Errorf("kubernetes backend: user %d: must not be negative", o.User)
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.ProxyNamespace == "" {
		o.ProxyNamespace = o.Namespace
	}
	if len(o.ProxySelector) == 0 {
		o.ProxySelector = DefaultProxySelector()
	}
	if o.ProxyPort == 0 {
		o.ProxyPort = sandbox.ProxyPort
	}
	if o.User == 0 {
		o.User = DefaultUser
	}
	if len(o.Idle) == 0 {
		o.Idle = []string{"sleep", "infinity"}
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Logger = o.Logger.With("component", "sandbox.kubernetes")
	if o.Execer == nil {
		o.Execer = &restExecer{client: o.Client, config: o.RESTConfig}
	}
	return &Backend{opts: o}, nil
}

func objectName(id string) string { return "airlock-" + id }
