package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/airlock-proxy/airlock/admin"
	"github.com/airlock-proxy/airlock/internal/hostfile"
	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/internal/termsafe"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
	"github.com/airlock-proxy/airlock/sandbox/kubernetes"
	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/telemetry"
)

// systemRoots are where Debian and its relatives keep the system CA bundle.
var systemRoots = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

type sandboxFlags struct {
	workspace, memory, report, patch, backend, image, id, adminListen string
	timeout                                                           time.Duration
	pids                                                              int64
	rawOutput                                                         bool
	cpus                                                              float64
	labels, env, protect                                              []string
	nofile, ptys, inodes                                              int64
	disk                                                              string
	allowAIO                                                          bool
	tty                                                               ttyMode
	interactive                                                       bool
	transparent                                                       bool
}

func addSandboxCmd(root *cobra.Command) {
	var pf proxyFlags
	var sf sandboxFlags
	run := &cobra.Command{
		Use:   "run [flags] -- CMD [ARG...]",
		Short: "Run a command in a sandbox whose only way out is an embedded airlock proxy",
		Long: `Run CMD in a fresh sandbox (native Linux namespaces by default; needs root): a network
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
The proxy flags do not apply there; the in-cluster proxy's config does.`,
		Example: `  # an allowed package index read, then a refused host
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
    --memory 1G --cpus 1 --timeout 10m --label task=triage --report report.json -- python3 agent.py`,
		Args: cobra.MinimumNArgs(1),
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
	fl := run.Flags()
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
	fl.StringVar(&sf.backend, "backend", "", "native, docker or kubernetes (default native)")
	fl.StringVar(&sf.image, "image", "", "container image (docker and kubernetes backends)")
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
	sb := &cobra.Command{Use: "sandbox", Short: "Spawn sandboxes fronted by the proxy", Example: run.Example}
	sb.AddCommand(run)
	addSessionCmds(sb)
	root.AddCommand(sb)
}

func runSandbox(cmd *cobra.Command, cfg *Config, sf *sandboxFlags, args []string) error {
	ctx := cmd.Context()
	if sf.backend != "" {
		cfg.Sandbox.Backend = sf.backend
	}
	if sf.image != "" {
		cfg.Sandbox.Image = sf.image
	}
	// A limit given on the command line must mean something: a negative or non-numeric one
	// is refused rather than silently replaced by the configured value.
	switch {
	case sf.timeout < 0:
		return fmt.Errorf("--timeout %s: want a positive duration such as 30s or 10m", sf.timeout)
	case sf.pids < 0 || cmd.Flags().Changed("pids") && sf.pids == 0:
		return fmt.Errorf("--pids %d: want a positive number of processes", sf.pids)
	case math.IsNaN(sf.cpus) || math.IsInf(sf.cpus, 0) || sf.cpus < 0 || cmd.Flags().Changed("cpus") && sf.cpus == 0:
		return fmt.Errorf("--cpus %v: want a positive number of cores, e.g. 0.5 or 2", sf.cpus)
	}
	if cmd.Flags().Changed("id") {
		if err := identity.CheckID(sf.id); err != nil {
			return fmt.Errorf("--id: %w", err)
		}
	}
	o := sandbox.Options{ID: sf.id, Timeout: cfg.Sandbox.Timeout, Pids: int64(cfg.Sandbox.Pids), CPUs: cfg.Sandbox.CPUs, Env: sf.env,
		AllowAIO: cfg.Sandbox.AllowAIO || sf.allowAIO, ProtectedPaths: cfg.Sandbox.ProtectedPaths,
		HiddenPaths: cfg.hiddenPaths(configFile(cmd))}
	o.ProxyOnly = cfg.Sandbox.Transparent != nil && !*cfg.Sandbox.Transparent
	if cmd.Flags().Changed("transparent") {
		o.ProxyOnly = !sf.transparent
	}
	if len(sf.protect) > 0 {
		if o.ProtectedPaths == nil {
			o.ProtectedPaths = sandbox.DefaultProtectedPaths
		}
		o.ProtectedPaths = append(slices.Clone(o.ProtectedPaths), sf.protect...)
	}
	for _, p := range sf.protect {
		if err := sandbox.CheckProtectedPath(p); err != nil {
			return fmt.Errorf("--protect: %w", err)
		}
	}
	if cmd.Flags().Changed("timeout") {
		o.Timeout = sf.timeout
	}
	mem, memKey := cfg.Sandbox.Memory, "sandbox.memory"
	if sf.memory != "" {
		mem, memKey = sf.memory, "--memory"
	}
	if mem != "" {
		n, err := parseMemory(mem)
		if err != nil {
			return fmt.Errorf("%s: %w", memKey, err)
		}
		o.Memory = n
	}
	if sf.pids > 0 {
		o.Pids = sf.pids
	}
	if sf.cpus > 0 {
		o.CPUs = sf.cpus
	}
	if err := hostBounds(cmd, cfg, sf, &o); err != nil {
		return err
	}
	if sf.workspace != "" {
		dir, mode, err := parseWorkspace(sf.workspace)
		if err != nil {
			return fmt.Errorf("--workspace: %w", err)
		}
		o.Workspace, o.WorkspaceMode = dir, mode
	}
	for _, kv := range sf.labels {
		k, v, err := sandbox.ParseKV(kv)
		if err != nil {
			return fmt.Errorf("--label: %w", err)
		}
		if o.Labels == nil {
			o.Labels = map[string]string{}
		}
		o.Labels[k] = v
	}

	if o.Disk > 0 && o.Workspace != "" && o.WorkspaceMode == sandbox.WorkspaceRW {
		// A read-write workspace is the host directory itself: only file system quotas
		// could bound it, and a bound that does not hold is not offered.
		return fmt.Errorf("--disk bounds a copy-on-write workspace's changes; a read-write workspace writes the host directory itself, which --disk cannot bound: use --workspace DIR:cow, or file system quotas")
	}
	if sf.patch != "" && o.WorkspaceMode != sandbox.WorkspaceCoW {
		return fmt.Errorf("--patch needs a copy-on-write workspace (--workspace DIR:cow)")
	}
	if sf.patch != "" && sf.report != "" && filepath.Clean(sf.patch) == filepath.Clean(sf.report) {
		return fmt.Errorf("--patch and --report name the same file %s", sf.report)
	}
	// Files written after the command are resolved now, before anything of the sandbox
	// runs: their directory is opened once and never looked up by path again, and each is
	// written under a fresh name and renamed into place (internal/hostfile). A report lost
	// after a long run is a run lost, so an unwritable one is refused here.
	var out postRun
	defer out.close()
	for _, f := range []struct {
		flag, path string
		dest       **hostfile.Dest
	}{{"--report", sf.report, &out.report}, {"--patch", sf.patch, &out.patch}} {
		if f.path == "" {
			continue
		}
		d, err := hostfile.Open(f.path)
		if err != nil {
			return fmt.Errorf("%s: %w", f.flag, err)
		}
		*f.dest = d
	}

	useTTY, err := sf.tty.want(os.Stdin, os.Stdout)
	if err != nil {
		return err
	}
	if cfg.Sandbox.Backend == "kubernetes" {
		if sf.tty.force {
			return fmt.Errorf("--tty: the kubernetes backend gives commands no terminal; use -T")
		}
		useTTY = false
	}
	var stdin io.Reader = os.Stdin
	if !sf.interactive {
		stdin = nil // -i=false: empty input
	}
	var tty *hostTTY
	if useTTY {
		tty = &hostTTY{in: os.Stdin, out: os.Stdout}
		defer tty.end() // also on a panic
	}

	remote := cfg.Sandbox.Backend == "kubernetes" || (cfg.Sandbox.Backend == "docker" && cfg.Sandbox.Docker.Mode == "internal")
	if remote {
		// The proxy runs elsewhere (a cluster, a container); nothing is embedded here.
		log := newLogger(cfg, os.Stderr)
		if cfg.Log.Level == "info" && !cmd.Flags().Changed("config") {
			cfg.Log.Level = "warn"
			log = newLogger(cfg, os.Stderr)
		}
		stdout, stderr, done := commandOutput(sf.rawOutput)
		defer done()
		if cfg.Sandbox.Backend == "docker" {
			return runDockerInternal(ctx, cfg, o, args, out.report, log, stdin, stdout, stderr, tty)
		}
		return runKubernetes(ctx, cfg, o, args, out.report, log, kubeRun{
			connect: kubernetes.Connect, stdin: stdin, stdout: stdout, stderr: stderr})
	}
	if cfg.Sandbox.Backend == "docker" {
		if cfg.Sandbox.Image == "" {
			return fmt.Errorf("--backend docker needs --image (a local image; nothing is pulled)")
		}
		b, err := dockerBackend(ctx, docker.Options{Image: cfg.Sandbox.Image, Runtime: cfg.Sandbox.Docker.Runtime})
		if err != nil {
			return err
		}
		defer b.Close()
		o.Backend = b
	} else {
		n := &native.Native{}
		if err := n.Cleanup(ctx); errors.Is(err, native.ErrNeedsRoot) {
			return err
		} else if err != nil {
			return fmt.Errorf("remove leftovers of earlier sandboxes: %w", err)
		}
		o.Backend = n
	}
	log := newLogger(cfg, os.Stderr)
	if cfg.Log.Level == "info" && !cmd.Flags().Changed("config") {
		// The command's own output matters here; the proxy speaks up for warnings.
		cfg.Log.Level = "warn"
		log = newLogger(cfg, os.Stderr)
	}
	fan := &auditFanout{}
	s, err := buildWith(ctx, cfg, log, fan)
	if err != nil {
		return err
	}
	defer s.close(context.Background())
	if sf.adminListen != "" {
		ln, err := net.Listen("tcp", sf.adminListen)
		if err != nil {
			return fmt.Errorf("--admin-listen: %w", err)
		}
		s.proxy.AddSelf(ln.Addr())
		s.cfg.AdminListen = sf.adminListen // the admin API answers to its name
		srv := admin.NewServer(s.adminHandler(), admin.ServerLimits{})
		go srv.Serve(ln)
		defer srv.Close()
	}
	o.CABundle = caBundle(s.ca.CertPEM())
	o.Proxy = s.proxy
	if s.broker != nil {
		o.Revoker = s.broker
	}
	o.Logger = log
	o.PolicyRevision = s.engine.Revision()
	o.OnEvent = s.lifecycleEvent
	sb, err := sandbox.New(ctx, o)
	if err != nil {
		return err // sandbox.New names the sandbox and the step
	}
	spanCtx, span := telemetry.StartSandboxSpan(ctx, s.telemetry.Tracer(), sb.ID(), o.Labels)
	s.telemetry.Metrics().SandboxStarted(spanCtx)
	fan.observe(sb.ID(), sb.Observe)
	stdout, stderr, done := commandOutput(sf.rawOutput)
	res, runErr := runCommand(ctx, sb, sandbox.Command{Args: args, Stdin: stdin, Stdout: stdout, Stderr: stderr}, tty)
	done()
	if out.patch != nil {
		// Before Close: the copy-on-write layer goes with the sandbox.
		out.writePatch(sb, os.Stderr)
	}
	closeErr := sb.Close(context.Background())
	warnSweep(sb, os.Stderr)
	s.telemetry.Metrics().SandboxEnded(spanCtx)
	errClass := ""
	if runErr != nil || closeErr != nil {
		errClass = "sandbox"
	} else if res.TimedOut {
		errClass = "timeout"
	}
	telemetry.EndSpan(span, errClass)
	out.writeReport(sb, os.Stderr)
	if runErr != nil {
		return fmt.Errorf("run: %w", runErr)
	}
	if closeErr != nil {
		log.Error("sandbox cleanup", "err", closeErr)
	}
	if res.TimedOut {
		fmt.Fprintf(os.Stderr, "airlock: sandbox %s timed out after %s; its processes were killed\n", sb.ID(), o.Timeout)
	}
	sayOOM(os.Stderr, sb.ID(), res, o.Memory)
	if res.ExitCode != 0 {
		return exitCode(res.ExitCode)
	}
	return nil
}

// runCommand runs cmd in sb, on a terminal of the sandbox tied to airlock's own when tty
// is not nil; airlock's terminal is back as it was when it returns.
func runCommand(ctx context.Context, sb *sandbox.Sandbox, cmd sandbox.Command, tty *hostTTY) (sandbox.Result, error) {
	defer tty.end()
	t, err := tty.start()
	if err != nil {
		return sandbox.Result{}, fmt.Errorf("terminal: %w", err)
	}
	cmd.TTY = t
	return sb.Run(ctx, cmd)
}

// sayOOM says on w that the kernel killed a process of the sandbox for want of memory:
// the exit status alone (137, SIGKILL) does not say why.
func sayOOM(w io.Writer, id string, res sandbox.Result, limit int64) {
	if !res.Usage.OOMKilled {
		return
	}
	lim := "its memory limit"
	if limit > 0 {
		lim = fmt.Sprintf("its memory limit of %s", formatSize(limit))
	}
	fmt.Fprintf(w, "airlock: sandbox %s ran out of memory: the kernel killed a process at %s (exit status %d); raise it with --memory or sandbox.memory\n",
		id, lim, res.ExitCode)
}

// formatSize writes n bytes as the --memory flag takes it (512M, 2G).
func formatSize(n int64) string {
	for _, u := range []struct {
		s string
		m int64
	}{{"G", 1 << 30}, {"M", 1 << 20}, {"k", 1 << 10}} {
		if n >= u.m && n%u.m == 0 {
			return fmt.Sprintf("%d%s", n/u.m, u.s)
		}
	}
	if n >= 1<<20 {
		return fmt.Sprintf("%.1fM", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}

// parseWorkspace reads --workspace DIR[:ro|:cow]; a suffix that is no mode is refused
// (naming the modes) unless a directory of that whole name exists.
func parseWorkspace(s string) (string, sandbox.WorkspaceMode, error) {
	dir, mode, err := sandbox.ParseWorkspace(s)
	if err != nil {
		return "", "", err
	}
	if i := strings.LastIndexByte(dir, ':'); i >= 0 && dir == s {
		suffix := dir[i+1:]
		if _, serr := os.Stat(dir); serr != nil && suffix != "" && !strings.ContainsRune(suffix, '/') {
			return "", "", fmt.Errorf("%q: unknown mode %q; want DIR (read-write), DIR:ro (read-only) or DIR:cow (copy-on-write)", s, suffix)
		}
	}
	return dir, mode, nil
}

// configFile is the --config flag's file, "" when none.
func configFile(cmd *cobra.Command) string {
	if f := cmd.Flags().Lookup("config"); f != nil {
		return f.Value.String()
	}
	return ""
}

// hostBounds sets the bounds on host-wide kernel tables and disk from the config and the
// flags (which win); a value given must be positive.
func hostBounds(cmd *cobra.Command, cfg *Config, sf *sandboxFlags, o *sandbox.Options) error {
	c := cfg.Sandbox
	for _, b := range []struct {
		flag, key string
		conf      int
		val       int64
		dst       *int64
	}{
		{"nofile", "sandbox.nofile", c.Nofile, sf.nofile, &o.Nofile},
		{"ptys", "sandbox.ptys", c.Ptys, sf.ptys, &o.Ptys},
		{"inodes", "sandbox.inodes", c.Inodes, sf.inodes, &o.Inodes},
	} {
		switch {
		case cmd.Flags().Changed(b.flag):
			if b.val <= 0 {
				return fmt.Errorf("--%s %d: want a positive number", b.flag, b.val)
			}
			*b.dst = b.val
		case b.conf < 0:
			return fmt.Errorf("%s: %d: want a positive number", b.key, b.conf)
		default:
			*b.dst = int64(b.conf)
		}
	}
	disk, what := c.Disk, "sandbox.disk"
	if cmd.Flags().Changed("disk") {
		disk, what = sf.disk, "--disk"
	}
	if disk != "" {
		n, err := sandbox.ParseSize(disk)
		if err == nil && n < 16<<20 {
			err = fmt.Errorf("%s: at least 16M", disk)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		o.Disk = n
	}
	return nil
}

// commandOutput is where a sandboxed command's output goes: airlock's stdout and stderr,
// through a filter that drops escape sequences acting beyond the screen (internal/termsafe)
// unless raw. done ends both streams (endOutput); it may be called more than once.
func commandOutput(raw bool) (stdout, stderr io.Writer, done func()) {
	o := &termStream{file: os.Stdout}
	e := &termStream{file: os.Stderr}
	if !raw {
		o.filter, e.filter = termsafe.NewWriter(os.Stdout), termsafe.NewWriter(os.Stderr)
	}
	o.all = []*termsafe.Writer{o.filter, e.filter}
	e.all = o.all
	return o, e, func() { endOutput(o, e) }
}

// termStream is one of airlock's streams as it carries a sandboxed command's output.
type termStream struct {
	file   *os.File
	filter *termsafe.Writer   // nil: raw
	all    []*termsafe.Writer // the filters of every stream sharing the terminal
	once   sync.Once
}

func (t *termStream) Write(p []byte) (int, error) {
	if t.filter == nil {
		return t.file.Write(p)
	}
	return t.filter.Write(p)
}

// finish ends the command's output: an incomplete escape sequence is dropped, and a
// terminal is sent termsafe.Restore, so that what airlock prints next (warnings, the
// report's and the patch's notes) is seen whatever the command's output left set
// (concealed text, the alternate screen, another character set).
func (t *termStream) finish() {
	t.once.Do(func() {
		if t.filter != nil {
			t.filter.Close()
		}
		if _, err := unix.IoctlGetTermios(int(t.file.Fd()), unix.TCGETS); err == nil {
			_, _ = t.file.Write(termsafe.Restore(t.all...))
		}
	})
}

// endOutput ends the command's output on the streams given that carry it (termStream);
// call it before airlock writes its own lines after the command.
func endOutput(ws ...io.Writer) {
	for _, w := range ws {
		if t, ok := w.(*termStream); ok {
			t.finish()
		}
	}
}

// postRun is what airlock writes on the host once the command has run. Its failures and
// shortfalls are said on stderr, never silently, and never change the exit status, which
// stays the command's.
type postRun struct {
	report, patch *hostfile.Dest
}

func (p *postRun) close() {
	p.report.Close()
	p.patch.Close()
}

// writeReport writes the run report, if one was asked for; call it after Close.
func (p *postRun) writeReport(sb *sandbox.Sandbox, stderr io.Writer) {
	if p.report == nil {
		return
	}
	rep := sb.Report()
	b, err := json.MarshalIndent(rep, "", "  ")
	if err == nil {
		err = p.report.WriteFile(append(b, '\n'))
	}
	if err != nil {
		fmt.Fprintf(stderr, "airlock: --report: not written: %s\n", termsafe.Text(err.Error()))
		return
	}
	if rep.ChangesIncomplete != "" {
		fmt.Fprintf(stderr, "airlock: --report %s: the change listing is incomplete: %s\n",
			termsafe.Text(p.report.Path()), termsafe.Text(rep.ChangesIncomplete))
	}
}

// warnSweep says loudly, after Close, when the sweep of a read-write workspace could not
// take away everything the sandbox left there that the host's git would run, read or
// block on (what it took away is logged as a warning). The exit status stays the
// command's: the run's contract; the report has it too (sweep_failed).
func warnSweep(sb *sandbox.Sandbox, stderr io.Writer) {
	if why := sb.Report().SweepFailed; why != "" {
		fmt.Fprintf(stderr, "airlock: WARNING: sandbox %s: the workspace sweep could not take away everything the host's git would run, read or block on (%s); check those paths before running git in the workspace\n",
			sb.ID(), termsafe.Text(why))
	}
}

// writePatch writes the sandbox's copy-on-write changes (an empty file when there are
// none); what the patch could not carry is named in it and said on stderr.
func (p *postRun) writePatch(sb *sandbox.Sandbox, stderr io.Writer) {
	pend, err := p.patch.Create()
	if err == nil {
		perr := sb.WritePatch(pend)
		if perr != nil && !errors.Is(perr, sandbox.ErrPatchIncomplete) {
			pend.Abort()
			err = perr
		} else if err = pend.Commit(); err == nil && perr != nil {
			// The patch is written; what it could not carry is said, not lost silently.
			fmt.Fprintf(stderr, "airlock: --patch %s: %s\n", termsafe.Text(p.patch.Path()), termsafe.Text(perr.Error()))
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "airlock: --patch: not written: %s\n", termsafe.Text(err.Error()))
	}
}

// caBundle is the system roots plus airlock's CA: what a sandbox trusts.
func caBundle(caPEM []byte) []byte {
	var b []byte
	for _, p := range systemRoots {
		if roots, err := os.ReadFile(p); err == nil {
			b = append(b, roots...)
			b = append(b, '\n')
			break
		}
	}
	return append(b, caPEM...)
}
