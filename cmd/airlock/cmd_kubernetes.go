package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"github.com/airlock-proxy/airlock/admin"
	"github.com/airlock-proxy/airlock/internal/hostfile"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
	"github.com/airlock-proxy/airlock/sandbox/kubernetes"
)

// The admin API client is the credential issuer of both container backends.
var (
	_ kubernetes.TokenIssuer = (*admin.Client)(nil)
	_ docker.TokenIssuer     = (*admin.Client)(nil)
)

// kubeRun is what `sandbox run --backend kubernetes` needs from outside: the cluster
// connection and, in tests, the exec transport and the command's streams.
type kubeRun struct {
	connect func(kubeconfig string) (kubernetes.Client, *rest.Config, error)
	execer  kubernetes.Execer // nil: pods/exec over the REST config
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
}

// runKubernetes runs args in a sandbox pod fronted by the in-cluster proxy Deployment: no
// proxy runs here; the sandbox's credential is issued (and revoked on Close) by the proxy's
// admin API, so every replica accepts it.
func runKubernetes(ctx context.Context, cfg *Config, o sandbox.Options, args []string, report *hostfile.Dest, log *slog.Logger, kr kubeRun) error {
	kc := cfg.Sandbox.Kubernetes
	switch {
	case cfg.Sandbox.Image == "":
		return errors.New("--backend kubernetes needs --image (or sandbox.image): the sandbox pod's image, pulled by the cluster")
	case kc.ProxyAdmin == "":
		return errors.New("--backend kubernetes needs sandbox.kubernetes.proxy_admin: the URL of the in-cluster proxy's admin API, which issues the sandbox's credential (e.g. http://airlock-admin.airlock.svc:9090)")
	case kc.TokenFile == "":
		return errors.New("--backend kubernetes needs sandbox.kubernetes.token_file: a file holding an issuer token of the proxy (one of its proxy.issuers)")
	case kc.InitImage == "":
		return errNoInitImage
	}
	if o.Workspace != "" {
		return fmt.Errorf("--workspace %s: host directories do not exist on the cluster's nodes; set sandbox.kubernetes.workspace_claim to a PersistentVolumeClaim", o.Workspace)
	}
	rp, err := newRemoteProxy("sandbox.kubernetes", kc.ProxyAdmin, kc.TokenFile, kc.CAFile, cfg.Home)
	if err != nil {
		return err
	}
	client, restCfg, err := kr.connect(kc.Kubeconfig)
	if err != nil {
		return fmt.Errorf("--backend kubernetes: no usable cluster configuration (sandbox.kubernetes.kubeconfig, $KUBECONFIG, ~/.kube/config, or the pod's service account): %w", err)
	}
	proxyNS := kc.ProxyNamespace
	if proxyNS == "" {
		proxyNS = "airlock"
	}
	proxySvc := kc.ProxyService
	if proxySvc == "" {
		proxySvc = "airlock"
	}
	issuer := rp.issuer
	if o.Timeout > 0 {
		// Long enough for the pod to start, the command and Close; without a timeout the
		// proxy's proxy.token_ttl applies. Close revokes it either way.
		issuer.TTL = o.Timeout + kubernetes.DefaultStartTimeout + 10*time.Minute
	}
	be, err := kubernetes.New(kubernetes.Options{
		Client: client, RESTConfig: restCfg, Execer: kr.execer,
		Namespace: kc.Namespace, Image: cfg.Sandbox.Image, InitImage: kc.InitImage, ConfinementProbe: kc.ConfinementProbe,
		ProxyService: proxySvc, ProxyNamespace: proxyNS, ProxyPort: kc.ProxyPort,
		Tokens: issuer, RuntimeClassName: kc.RuntimeClass, WorkspaceClaim: kc.WorkspaceClaim,
		Logger: log,
	})
	if err != nil {
		return err
	}
	o.Backend = be
	o.CABundle = caBundle(rp.caPEM)
	o.Logger = log
	return runRemote(ctx, o, args, report, kr.stdin, kr.stdout, kr.stderr, nil)
}

// remoteProxy is a proxy running elsewhere (a Deployment in a cluster, a container) that
// issues and revokes sandboxes' credentials through its admin API.
type remoteProxy struct {
	issuer *admin.Client
	caPEM  []byte // its CA, which sandboxes trust
}

// newRemoteProxy reads the issuer token and the proxy's CA named in a config section.
func newRemoteProxy(section, adminURL, tokenFile, caFile, home string) (*remoteProxy, error) {
	b, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("%s.token_file: %w", section, err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return nil, fmt.Errorf("%s.token_file: %s is empty", section, tokenFile)
	}
	if caFile == "" {
		caFile = filepath.Join(home, "ca", "ca.pem")
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%s.ca_file: the proxy's CA certificate, which sandboxes trust: %w", section, err)
	}
	return &remoteProxy{issuer: &admin.Client{BaseURL: adminURL, Token: token}, caPEM: caPEM}, nil
}

// runRemote runs args in a sandbox whose backend gets its credential from a remote proxy
// (o.Backend set), writes the report, and closes it, which revokes the credential. It
// returns the command's exit status as an exitCode error.
func runRemote(ctx context.Context, o sandbox.Options, args []string, report *hostfile.Dest, stdin io.Reader, stdout, stderr io.Writer, tty *hostTTY) error {
	sb, err := sandbox.New(ctx, o)
	if err != nil {
		return err // sandbox.New names the sandbox and the step
	}
	res, runErr := runCommand(ctx, sb, sandbox.Command{Args: args, Stdin: stdin, Stdout: stdout, Stderr: stderr}, tty)
	endOutput(stdout, stderr)
	closeErr := sb.Close(context.Background())
	warnSweep(sb, stderr)
	(&postRun{report: report}).writeReport(sb, stderr)
	if closeErr != nil {
		// The credential may still be valid, or objects left in the cluster: say so loudly.
		fmt.Fprintf(stderr, "airlock: sandbox %s cleanup failed: %v\n", sb.ID(), closeErr)
	}
	if runErr != nil {
		return fmt.Errorf("run: %w", runErr)
	}
	if closeErr != nil && res.ExitCode == 0 {
		return fmt.Errorf("sandbox %s cleanup: %w", sb.ID(), closeErr)
	}
	if res.TimedOut {
		fmt.Fprintf(stderr, "airlock: sandbox %s timed out after %s; its command was killed\n", sb.ID(), o.Timeout)
	}
	if res.ExitCode != 0 {
		return exitCode(res.ExitCode)
	}
	return nil
}

// newConfinementCheckCmd is what a Kubernetes sandbox pod's init container runs (from
// airlock's image): it exits 0 once the pod's NetworkPolicy is in force, and 1 with the
// reason, which becomes the pod's termination message, when it is not in time.
func newConfinementCheckCmd() *cobra.Command {
	var proxy, forbidden string
	var timeout time.Duration
	c := &cobra.Command{
		Use:    "confinement-check --proxy HOST:PORT [--forbidden HOST:PORT|none] [--timeout D]",
		Short:  "Wait, inside a sandbox pod, until only the proxy is reachable (the Kubernetes backend's init container)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, _, err := net.SplitHostPort(proxy); err != nil {
				return fmt.Errorf("--proxy %q: want HOST:PORT: %w", proxy, err)
			}
			if forbidden != "" && forbidden != kubernetes.ConfinementProbeNone {
				if _, _, err := net.SplitHostPort(forbidden); err != nil {
					return fmt.Errorf("--forbidden %q: want HOST:PORT or none: %w", forbidden, err)
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			if err := kubernetes.CheckConfinement(ctx, proxy, forbidden); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "confined: the proxy answers, nothing else does")
			return nil
		},
	}
	c.Flags().StringVar(&proxy, "proxy", "", "the proxy's address, which must answer")
	c.Flags().StringVar(&forbidden, "forbidden", "", "an address the pod's policy must refuse (default: the API server, from KUBERNETES_SERVICE_HOST/PORT), or none")
	c.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait")
	return c
}
