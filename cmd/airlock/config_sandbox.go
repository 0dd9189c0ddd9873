package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/kubernetes"
)

// SandboxConfig holds defaults for `airlock sandbox run`.
type SandboxConfig struct {
	Backend string `yaml:"backend"` // native | docker | kubernetes
	// Image is the docker and kubernetes backends' container image; for the native
	// backend a root file system of its own (flag --image): a `docker save` or OCI image
	// tarball, an OCI layout directory or an image of the local Docker engine, unpacked once
	// into $AIRLOCK_HOME/images.
	Image string `yaml:"image"`
	// Rootfs is a directory the native backend shows as the sandbox's root (flag --rootfs);
	// unset (and no image): the host's root, read-only.
	Rootfs  string        `yaml:"rootfs"`
	Timeout time.Duration `yaml:"timeout"`
	Memory  string        `yaml:"memory"`
	Pids    int           `yaml:"pids"`
	CPUs    float64       `yaml:"cpus"`
	// Bounds on host-wide kernel tables and disk (flags --nofile, --ptys, --inodes, --disk).
	Nofile int    `yaml:"nofile"`
	Ptys   int    `yaml:"ptys"`
	Inodes int    `yaml:"inodes"`
	Disk   string `yaml:"disk"`
	// AllowAIO permits Linux AIO (io_setup and its family) in sandboxes; refused by
	// default, since AIO contexts are machine-wide with no per-namespace limit.
	AllowAIO bool `yaml:"allow_aio"`
	// AllowUnenforcedLimits lets a rootless native sandbox run when a memory or CPU
	// limit was asked for that it cannot enforce (no delegated cgroup offering the
	// controller: see CgroupParent); the run report says so.
	AllowUnenforcedLimits bool `yaml:"allow_unenforced_limits"`
	// CgroupParent is a cgroup v2 directory the user owns (made once by root with
	// `airlock sandbox delegate-cgroup`) in which each rootless native sandbox gets a
	// cgroup of its own, with the memory, pids and CPU limits of a root sandbox for the
	// controllers it offers (flag --cgroup-parent). Unset: the systemd user manager's
	// delegated subtree when airlock runs in it, else none. Root sandboxes ignore it.
	CgroupParent string `yaml:"cgroup_parent"`
	// Transparent routes every TCP connection and DNS query of a native or Docker (netns)
	// sandbox into airlock, for clients that ignore HTTP_PROXY; on unless set to false
	// (flag --transparent=false). HTTP_PROXY keeps working either way.
	Transparent *bool `yaml:"transparent"`
	// ProtectedPaths are workspace paths (relative to it) that host tools run or read as
	// configuration, read-only inside a read-write or copy-on-write workspace when they
	// exist at start; git's hooks and config always are. Unset: the default list
	// (sandbox.DefaultProtectedPaths: .vscode, .idea, .envrc, ...); [] protects git's alone.
	ProtectedPaths []string `yaml:"protected_paths"`
	// MaskPaths are host paths a native sandbox on the host's root must not see, besides
	// sandbox.DefaultMaskPaths (/root, /home, /etc/ssh, /var/lib/docker...); UnmaskPaths
	// are taken from the list (a path given exactly as listed). A path may start with ~/,
	// airlock's user's home.
	MaskPaths   []string `yaml:"mask_paths"`
	UnmaskPaths []string `yaml:"unmask_paths"`
	// Docker configures --backend docker.
	Docker DockerConfig `yaml:"docker"`
	// Kubernetes configures --backend kubernetes.
	Kubernetes KubernetesConfig `yaml:"kubernetes"`
}

// DockerConfig is how `airlock sandbox run --backend docker` fronts its container.
type DockerConfig struct {
	// Mode is "netns" (default): an embedded proxy whose listener is opened inside a
	// --network none container (root beside the Docker daemon); or "internal": the proxy
	// runs in its own container (ProxyContainer), each sandbox gets an internal network
	// shared only with it, and a credential issued and revoked by its admin API.
	Mode string `yaml:"mode"`
	// ProxyContainer is the proxy's container (name or id); required in internal mode.
	ProxyContainer string `yaml:"proxy_container"`
	// ProxyPort is the port the proxy listens on in that container; default 3128.
	ProxyPort int `yaml:"proxy_port"`
	// ProxyAdmin is the URL of that proxy's admin API, as reachable from here; required
	// in internal mode.
	ProxyAdmin string `yaml:"proxy_admin"`
	// TokenFile holds an issuer token of that proxy (its proxy.issuers); required in
	// internal mode.
	TokenFile string `yaml:"token_file"`
	// CAFile is that proxy's CA certificate (PEM), which sandboxes trust; default
	// $AIRLOCK_HOME/ca/ca.pem.
	CAFile string `yaml:"ca_file"`
	// Runtime is an OCI runtime registered with the daemon, e.g. runsc; optional.
	Runtime string `yaml:"runtime"`
}

// KubernetesConfig is how `airlock sandbox run --backend kubernetes` reaches the cluster
// and the in-cluster proxy (deploy/kubernetes). No embedded proxy runs: credentials are
// issued by the proxy's admin API.
type KubernetesConfig struct {
	// Kubeconfig; empty: in-cluster when in a pod, else $KUBECONFIG or ~/.kube/config.
	Kubeconfig string `yaml:"kubeconfig"`
	// Namespace sandboxes run in; default airlock-sandboxes.
	Namespace string `yaml:"namespace"`
	// ProxyService and ProxyNamespace name the proxy's Service; default airlock/airlock.
	ProxyService   string `yaml:"proxy_service"`
	ProxyNamespace string `yaml:"proxy_namespace"`
	// ProxyPort is the Service's proxy port; default 3128.
	ProxyPort int `yaml:"proxy_port"`
	// ProxyAdmin is the URL of the proxy's admin API (required), e.g.
	// http://airlock-admin.airlock.svc:9090.
	ProxyAdmin string `yaml:"proxy_admin"`
	// TokenFile holds an issuer token of the proxy (its proxy.issuers); required.
	TokenFile string `yaml:"token_file"`
	// CAFile is the proxy's CA certificate (PEM), which sandboxes trust; default
	// $AIRLOCK_HOME/ca/ca.pem (the CA the airlock-ca Secret was made from).
	CAFile string `yaml:"ca_file"`
	// RuntimeClass, e.g. gvisor or kata; optional.
	RuntimeClass string `yaml:"runtime_class"`
	// WorkspaceClaim is a PersistentVolumeClaim mounted at /workspace; optional.
	WorkspaceClaim string `yaml:"workspace_claim"`
	// InitImage is airlock's own image as the cluster knows it (required, e.g. the proxy
	// Deployment's): each sandbox pod's init container runs `airlock sandbox
	// confinement-check` from it, and no command runs before its NetworkPolicy is in force.
	InitImage string `yaml:"init_image"`
	// ConfinementProbe is a HOST:PORT the sandbox's policy must refuse before its pod
	// starts; default the API server's Service; "none" only waits for the proxy to answer.
	ConfinementProbe string `yaml:"confinement_probe"`
}

// errNoInitImage is the error for a kubernetes sandbox without sandbox.kubernetes.init_image.
var errNoInitImage = errors.New("a kubernetes sandbox needs sandbox.kubernetes.init_image: airlock's own image as the cluster pulls it (the proxy Deployment's, e.g. airlock:dev); each sandbox pod's init container runs from it and holds the pod until its NetworkPolicy is in force")

func (c SandboxConfig) validate() error {
	var errs []error
	for i, p := range c.ProtectedPaths {
		if err := sandbox.CheckProtectedPath(p); err != nil {
			errs = append(errs, fmt.Errorf("sandbox.protected_paths[%d]: %w", i, err))
		}
	}
	for _, k := range []struct {
		key   string
		paths []string
	}{{"sandbox.mask_paths", c.MaskPaths}, {"sandbox.unmask_paths", c.UnmaskPaths}} {
		for i, p := range k.paths {
			if !filepath.IsAbs(p) && !strings.HasPrefix(p, "~/") {
				errs = append(errs, fmt.Errorf("%s[%d]: %q: want an absolute path or one under ~/", k.key, i, p))
			}
		}
	}
	if c.CgroupParent != "" && !filepath.IsAbs(c.CgroupParent) {
		errs = append(errs, fmt.Errorf("sandbox.cgroup_parent: %q: want an absolute path, e.g. /sys/fs/cgroup/airlock-USER", c.CgroupParent))
	}
	if c.Memory != "" {
		if _, err := parseMemory(c.Memory); err != nil {
			errs = append(errs, fmt.Errorf("sandbox.memory: %w", err))
		}
	}
	return errors.Join(append(errs, c.Kubernetes.validate(), c.Docker.validate())...)
}

func (k KubernetesConfig) validate() error {
	var err error
	if p := k.ConfinementProbe; p != "" && p != kubernetes.ConfinementProbeNone {
		if _, _, e := net.SplitHostPort(p); e != nil {
			err = fmt.Errorf("sandbox.kubernetes.confinement_probe: %q: want HOST:PORT or none", p)
		}
	}
	return errors.Join(err, validateRemoteProxy("sandbox.kubernetes", k.ProxyAdmin, k.ProxyPort))
}

func (d DockerConfig) validate() error {
	switch d.Mode {
	case "", "netns", "internal":
	default:
		return fmt.Errorf("sandbox.docker.mode: %q: want netns or internal", d.Mode)
	}
	return validateRemoteProxy("sandbox.docker", d.ProxyAdmin, d.ProxyPort)
}

// validateRemoteProxy checks the admin URL and proxy port of a proxy running elsewhere.
func validateRemoteProxy(section, admin string, port int) error {
	if admin != "" {
		u, err := url.Parse(admin)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s.proxy_admin: %q: want the admin API's http:// or https:// URL", section, admin)
		}
		if u.User != nil {
			return fmt.Errorf("%s.proxy_admin: put the issuer token in %s.token_file, not in the URL", section, section)
		}
	}
	if port < 0 || port > 65535 {
		return fmt.Errorf("%s.proxy_port: %d is not a port", section, port)
	}
	return nil
}

// minMemory is the smallest memory limit taken: below it not even a shell starts, and a
// bare number counts bytes (--memory 1 is one byte, not a gigabyte).
const minMemory = 16 << 20

// parseMemory reads a memory limit (--memory, sandbox.memory).
func parseMemory(s string) (int64, error) {
	n, err := sandbox.ParseSize(s)
	if err != nil {
		return 0, err
	}
	if n < minMemory {
		return 0, fmt.Errorf("%q is %d bytes, below the minimum of 16M (a number without a unit counts bytes); want a size such as 512M or 2G", s, n)
	}
	return n, nil
}
