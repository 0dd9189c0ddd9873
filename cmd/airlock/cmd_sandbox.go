package main

import (
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

type sandboxFlags struct {
	workspace, memory, report, patch, backend, image, rootfs, id, adminListen string
	timeout                                                                   time.Duration
	pids                                                                      int64
	rawOutput                                                                 bool
	cpus                                                                      float64
	labels, env, protect                                                      []string
	nofile, ptys, inodes                                                      int64
	disk, cgroupParent                                                        string
	allowAIO, allowUnenforced                                                 bool
	tty                                                                       ttyMode
	interactive                                                               bool
	transparent                                                               bool
}

func addSandboxCmd(root *cobra.Command) {
	var pf proxyFlags
	var sf sandboxFlags
	run := &cobra.Command{
		Use:     "run [flags] -- CMD [ARG...]",
		Short:   "Run a command in a sandbox whose only way out is an embedded airlock proxy",
		Long:    sandboxRunLong,
		Example: sandboxRunExample,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, _, err := pf.load(cmd)
			if err != nil {
				return err
			}
			// A closed terminal (SIGHUP) ends the run as SIGINT and SIGTERM do: the sandbox
			// is destroyed and its leases revoked. (For 'airlock proxy' SIGHUP reloads.)
			return onSignal(cmd, syscall.SIGHUP, func() error { return runSandbox(cmd, cfg, &sf, args) })
		},
	}
	pf.bindCommon(run)
	bindSandboxFlags(run.Flags(), &sf)
	sb := &cobra.Command{Use: "sandbox", Short: "Spawn sandboxes fronted by the proxy", Example: run.Example}
	sb.AddCommand(run)
	addSessionCmds(sb)
	sb.AddCommand(newDelegateCgroupCmd(), newConfinementCheckCmd())
	root.AddCommand(sb)
}

// bindSandboxFlags declares the flags of 'airlock sandbox run'.
func bindSandboxFlags(fl *pflag.FlagSet, sf *sandboxFlags) {
	fl.StringVar(&sf.workspace, "workspace", "", "host directory mounted at /workspace: DIR, DIR:ro or DIR:cow (copy-on-write; the host copy stays untouched)")
	fl.DurationVar(&sf.timeout, "timeout", 0, "wall-clock limit; the whole process tree is killed and airlock exits 124 (0: none, whatever the config says)")
	fl.StringVar(&sf.memory, "memory", "", "memory limit, e.g. 512M or 2G")
	fl.Int64Var(&sf.pids, "pids", 0, "process limit (the command's init counts as one)")
	fl.Float64Var(&sf.cpus, "cpus", 0, "CPU limit in cores, e.g. 1.5")
	fl.StringArrayVar(&sf.labels, "label", nil, "sandbox label K=V, seen by the policy as input.sandbox.labels (repeatable)")
	fl.StringArrayVar(&sf.env, "env", nil, "environment variable K=V for the command (repeatable)")
	fl.StringArrayVar(&sf.protect, "protect", nil, "workspace path (relative to it) that host tools run, read-only inside when it exists, besides sandbox.protected_paths or the default list and git's hooks and config (repeatable)")
	fl.BoolVar(&sf.transparent, "transparent", true, "route every TCP connection and DNS query of the sandbox into airlock, for clients that ignore HTTP_PROXY (native and Docker netns backends; sandbox.transparent in the config)")
	fl.BoolVar(&sf.allowAIO, "allow-aio", false, "permit Linux AIO (io_setup) in the sandbox; refused by default: AIO contexts are machine-wide, with no per-sandbox limit")
	fl.BoolVar(&sf.allowUnenforced, "allow-unenforced-limits", false, "run a rootless native sandbox even though --memory or --cpus cannot be enforced without root or a delegated cgroup (sandbox.allow_unenforced_limits); otherwise such a run is refused")
	fl.StringVar(&sf.cgroupParent, "cgroup-parent", "", "rootless native sandbox: a cgroup v2 directory you own (see 'airlock sandbox delegate-cgroup') in which the sandbox gets a cgroup with the limits of a root one (sandbox.cgroup_parent)")
	fl.StringVar(&sf.backend, "backend", "", "native, docker or kubernetes (default native)")
	fl.StringVar(&sf.image, "image", "", "container image (docker and kubernetes backends); native: the sandbox's root, read-only: a docker save or OCI image tarball, an OCI layout directory or a local Docker engine image, unpacked once into $AIRLOCK_HOME/images")
	fl.StringVar(&sf.rootfs, "rootfs", "", "native backend: a directory shown read-only as the sandbox's root (default: the host's root, with host secrets masked)")
	fl.StringVar(&sf.report, "report", "", "write the JSON run report to this file")
	fl.StringVar(&sf.patch, "patch", "", "with --workspace DIR:cow, write the sandbox's changes to this file as a git-style patch (apply with 'git apply')")
	fl.StringVar(&sf.id, "id", "", "sandbox id: lower-case letters, digits and - (default: generated)")
	fl.Int64Var(&sf.nofile, "nofile", 0, "open files per process, soft and hard limit (default 1024, lowered so that with --pids the sandbox holds at most a quarter of the host's fs.file-max)")
	fl.Int64Var(&sf.ptys, "ptys", 0, "pseudo-terminals the sandbox may hold (default 64)")
	fl.Int64Var(&sf.inodes, "inodes", 0, "files (inodes) each of /tmp, $HOME and /dev/shm may hold (default 65536)")
	fl.StringVar(&sf.disk, "disk", "", "host disk a copy-on-write workspace's changes may take, e.g. 2G (default 10G); a read-write workspace is not bounded by it")
	fl.BoolVar(&sf.rawOutput, "raw-output", false, "pass the command's output unchanged (binary output); by default escape sequences that act beyond the screen (OSC: clipboard, title, links; DCS, APC, PM, SOS; window reports) are dropped")
	fl.BoolVarP(&sf.tty.force, "tty", "t", false, "give the command a terminal of the sandbox's own (its private devpts; never the host's), with airlock's terminal in raw mode while it runs; the default when stdin and stdout are terminals")
	fl.BoolVarP(&sf.tty.refuse, "no-tty", "T", false, "never give the command a terminal: pipes, even when stdin and stdout are terminals")
	fl.BoolVarP(&sf.interactive, "interactive", "i", true, "pass airlock's stdin to the command (the default; -i=false gives it empty input)")
	fl.StringVar(&sf.adminListen, "admin-listen", "", "also serve the admin API (approvals page, metrics) on this address while the sandbox runs")
}

const sandboxRunLong = `Run CMD in a fresh sandbox (native Linux namespaces by default; needs root): a network
namespace with only loopback, where the proxy listens on 127.0.0.1:3128 for this sandbox
alone, a read-only root, the workspace, a private /tmp, no host secrets, no capabilities,
a seccomp filter and cgroup limits. The environment is built, not inherited: proxy and CA
variables, PATH, HOME, LANG and what --env adds. The proxy flags mean what they mean for
'airlock proxy'; the shipped policy applies unless --policy says otherwise.

With a terminal (-t, or stdin and stdout both terminals, unless -T), CMD runs on a
pseudo-terminal of the sandbox's own private devpts, never the host's, with job control;
airlock's terminal is in raw mode while it runs (keys such as Ctrl-C reach CMD's
foreground process group inside) and is restored on every way out; its size follows
SIGWINCH; stdout and stderr are then one stream.

Exits with CMD's exit status (124 on timeout; 128+n when signal n, SIGINT, SIGTERM or
SIGHUP, stopped airlock). On exit the sandbox's Vault leases are revoked and everything it
made is removed.

--backend kubernetes runs no proxy here: the sandbox is a Pod (with a NetworkPolicy and a
Secret) whose only way out is the in-cluster proxy Deployment. Its credential is issued
and, on exit, revoked through the proxy's admin API (sandbox.kubernetes.proxy_admin, with
an issuer token from sandbox.kubernetes.token_file); the cluster is reached through
sandbox.kubernetes.kubeconfig, $KUBECONFIG, ~/.kube/config or the pod's service account.
The proxy flags do not apply there; the in-cluster proxy's config does.`

const sandboxRunExample = `  # an allowed package index read, then a refused host
  airlock sandbox run -- sh -c 'curl -sS https://proxy.golang.org/golang.org/x/net/@v/list | tail -3; curl -sS https://example.com/'

  # an interactive shell on a terminal of the sandbox's own (-t is the default when
  # stdin and stdout are terminals; -T keeps pipes)
  airlock sandbox run -it --workspace .:cow -- bash -i

  # a project checkout, copy-on-write, with limits and a report
  airlock sandbox run --workspace ./repo:cow --memory 512M --pids 256 --timeout 2m \
    --label task=triage --report report.json -- python3 /workspace/agent.py

  # a container on an internal network shared only with the proxy's own container;
  # airlock.yaml has sandbox.docker: {mode: internal, proxy_container, proxy_admin, token_file}
  airlock sandbox run --config airlock.yaml --backend docker --image agent:local -- sh -c 'curl -sS https://pypi.org/simple/ | head'

  # a pod on Kubernetes, fronted by the in-cluster proxy Deployment (deploy/kubernetes);
  # airlock.yaml has sandbox.kubernetes.proxy_admin and token_file (an issuer token)
  airlock sandbox run --config airlock.yaml --backend kubernetes --image registry.example/agent:1 \
    --memory 1G --cpus 1 --timeout 10m --label task=triage --report report.json -- python3 agent.py`
