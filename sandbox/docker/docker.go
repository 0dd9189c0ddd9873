// Package docker is a sandbox.Backend that runs each sandbox as a Docker container, through
// the Docker Engine API.
//
// Two network modes:
//
//   - ModeNetNS (the strongest; the default when airlock runs as root beside a local
//     daemon): the container has `--network none`, and the proxy's listener is opened inside
//     the container's own network namespace at 127.0.0.1:3128 and [::1]:3128, exactly as
//     the native backend does. The listener is the identity; there is no network at all,
//     and so no Docker DNS either.
//   - ModeInternal (not root, or a remote daemon): the container is the only sandbox on an
//     `internal` Docker network of its own whose other member is the proxy's container, and
//     HTTP_PROXY carries a per-sandbox proxy credential that the proxy issued and that is
//     revoked on Close.
//
// In both, the container runs with every capability dropped, no-new-privileges, a read-only
// root file system with sized tmpfs /tmp and $HOME, a non-root user, pids/memory/CPU limits,
// Docker's init as PID 1, the workspace bound read-write or read-only, the CA bundle bound
// read-only, and no Docker socket. Close removes the container (and its network).
package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/docker/docker/client"

	"github.com/airlock-proxy/airlock/sandbox"
)

// Mode is how a sandbox container reaches the proxy.
type Mode string

// Network modes.
const (
	ModeAuto     Mode = ""         // ModeNetNS when root with a local daemon, else ModeInternal
	ModeNetNS    Mode = "netns"    // --network none; the proxy listens inside the container
	ModeInternal Mode = "internal" // own internal network shared with the proxy container; credential in HTTP_PROXY
)

// TokenIssuer issues and revokes per-sandbox proxy credentials: *proxy.Proxy in the same
// process, or *admin.Client for a proxy in its own container (its admin API). A client
// presents the token as http://ID:TOKEN@proxy:3128 in HTTP_PROXY. Errors end the Create
// (issue) or are reported by Close (revoke).
type TokenIssuer interface {
	IssueToken(ctx context.Context, id sandbox.Identity) (string, error)
	RevokeToken(ctx context.Context, sandboxID string) error
}

// Options configure the Docker backend.
type Options struct {
	Image string // sandbox image; required (nothing is pulled: it must exist on the daemon)
	// Client talks to the daemon; nil means one from the DOCKER_* environment with API
	// version negotiation.
	Client *client.Client
	Mode   Mode
	// User is the container user as uid:gid. Default: the owner of a read-write workspace
	// when that is not root (so the sandbox can write it, as with the native backend's
	// id-mapped mount), else a uid of the sandbox's own from a host uid range reserved for
	// it machine-wide (sandbox.ReserveUIDRange), never a user of the host. Never root.
	User string
	// Runtime is an OCI runtime name registered with the daemon (e.g. "runsc"); empty
	// means the daemon's default.
	Runtime string
	// Idle keeps the container alive between commands; default ["sleep", "infinity"]. It
	// runs under Docker's init.
	Idle []string
	// StateDir holds per-sandbox files bound into containers (the CA bundle); default
	// DefaultStateDir. It must be on the daemon's host (ModeNetNS implies so).
	StateDir string

	// ModeInternal: Tokens issues the sandbox's proxy credential (required), ProxyContainer
	// is the proxy's container (name or id), connected to each sandbox's network, and
	// ProxyPort the port it listens on there (default sandbox.ProxyPort).
	Tokens         TokenIssuer
	ProxyContainer string
	ProxyPort      int

	Logger *slog.Logger // nil means discard
}

// Defaults.
const (
	DefaultStateDir = "/run/airlock/docker"
	// Label marks every container and network the backend creates; its value is the
	// sandbox id.
	Label = "org.airlock-proxy.sandbox"
)

// Backend creates sandbox containers. It is safe for concurrent use.
type Backend struct {
	opts Options
	cli  *client.Client
	own  bool // cli was created here
	mode Mode
	// local: airlock is root beside the daemon and sees container processes in /proc.
	local   bool
	seccomp [2]string // the profile's JSON, without and with AIO
	owner   string    // OwnerLabel value
}

var _ sandbox.Backend = (*Backend)(nil)

// New checks o and connects to the daemon (lazily: the first call talks to it).
func New(o Options) (*Backend, error) {
	if o.Image == "" {
		return nil, errors.New("docker backend: image is required")
	}
	if o.User != "" {
		if err := checkUser(o.User); err != nil {
			return nil, err
		}
	}
	if len(o.Idle) == 0 {
		o.Idle = []string{"sleep", "infinity"}
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.ProxyPort == 0 {
		o.ProxyPort = sandbox.ProxyPort
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.Logger = o.Logger.With("component", "sandbox.docker")
	b := &Backend{opts: o, cli: o.Client, owner: owner()}
	var err error
	if b.seccomp, err = seccompProfiles(); err != nil {
		return nil, err
	}
	if b.cli == nil {
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return nil, fmt.Errorf("docker backend: connect to daemon: %w", err)
		}
		b.cli, b.own = cli, true
	}
	b.local = os.Geteuid() == 0 && strings.HasPrefix(b.cli.DaemonHost(), "unix://")
	b.mode = o.Mode
	if b.mode == ModeAuto {
		b.mode = ModeInternal
		if b.local {
			b.mode = ModeNetNS
		}
	}
	switch b.mode {
	case ModeNetNS:
		if os.Geteuid() != 0 {
			return nil, errors.New("docker backend: mode netns needs root")
		}
	case ModeInternal:
		if o.Tokens == nil || o.ProxyContainer == "" {
			return nil, errors.New("docker backend: mode internal needs a token issuer and the proxy's container")
		}
	default:
		return nil, fmt.Errorf("docker backend: mode %q: want netns or internal", o.Mode)
	}
	return b, nil
}

// Mode is the network mode in use.
func (b *Backend) Mode() Mode { return b.mode }

// Client is the Docker client in use.
func (b *Backend) Client() *client.Client { return b.cli }

// Close releases the daemon connection if New created it. Sandboxes are closed on their own.
func (b *Backend) Close() error {
	if b.own {
		return b.cli.Close()
	}
	return nil
}

// checkUser accepts uid[:gid] with a numeric, non-zero uid: a name could map to root in
// the image.
func checkUser(u string) error {
	uid, gid, _ := strings.Cut(u, ":")
	for _, s := range []string{uid, gid} {
		if s == "" && s == gid {
			continue
		}
		if s == "" || strings.Trim(s, "0123456789") != "" {
			return fmt.Errorf("docker backend: user %q: want numeric uid:gid", u)
		}
	}
	if strings.TrimLeft(uid, "0") == "" || (gid != "" && strings.TrimLeft(gid, "0") == "") {
		return fmt.Errorf("docker backend: user %q: must not be root", u)
	}
	return nil
}
