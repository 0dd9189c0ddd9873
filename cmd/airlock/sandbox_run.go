package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/airlock-proxy/airlock/admin"
	"github.com/airlock-proxy/airlock/internal/gctune"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
	"github.com/airlock-proxy/airlock/sandbox/kubernetes"
	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/telemetry"
	"github.com/spf13/cobra"
)

// runSandbox is 'airlock sandbox run': the options from the config and the flags, the
// files written after the run, the command's input and terminal, then the backend: a
// remote one (kubernetes, docker in internal mode) whose proxy runs elsewhere, or a local
// one fronted by a proxy embedded here.
func runSandbox(cmd *cobra.Command, cfg *Config, sf *sandboxFlags, args []string) error {
	ctx := cmd.Context()
	if sf.backend != "" {
		cfg.Sandbox.Backend = sf.backend
	}
	if sf.image != "" {
		cfg.Sandbox.Image = sf.image
	}
	o, err := sandboxOptions(cmd, cfg, sf)
	if err != nil {
		return err
	}
	out, err := openPostRun(sf)
	if err != nil {
		return err
	}
	defer out.close()
	rio, err := commandInput(cfg, sf)
	if err != nil {
		return err
	}
	defer rio.tty.end() // also on a panic
	log := sandboxLogger(cmd, cfg)
	if cfg.Sandbox.Backend == "kubernetes" || (cfg.Sandbox.Backend == "docker" && cfg.Sandbox.Docker.Mode == "internal") {
		// The proxy runs elsewhere (a cluster, a container); nothing is embedded here.
		stdout, stderr, done := commandOutput(sf.rawOutput)
		defer done()
		if cfg.Sandbox.Backend == "docker" {
			return runDockerInternal(ctx, cfg, o, args, out.report, log, rio.stdin, stdout, stderr, rio.tty)
		}
		return runKubernetes(ctx, cfg, o, args, out.report, log, kubeRun{
			connect: kubernetes.Connect, stdin: rio.stdin, stdout: stdout, stderr: stderr})
	}
	closeBackend, err := localBackend(ctx, cfg, &o)
	if err != nil {
		return err
	}
	defer closeBackend()
	if cfg.Sandbox.Backend != "docker" {
		if err := nativeRoot(ctx, cfg, sf, &o); err != nil {
			return err
		}
	}
	// The policy loads while the sandbox is made; runLocal waits for it before the command.
	s, err := buildStarted(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer s.close(context.Background())
	gctune.Start(gctune.Default)
	stopAdmin, err := s.serveAdmin(sf.adminListen)
	if err != nil {
		return err
	}
	defer stopAdmin()
	return s.runLocal(ctx, s.localOptions(o), args, rio, out, sf.rawOutput)
}

// runInput is a sandboxed command's input: airlock's stdin (nil: empty input) and, when
// the command gets a terminal, airlock's own tied to it.
type runInput struct {
	stdin io.Reader
	tty   *hostTTY // nil: pipes
}

// commandInput decides the command's input and whether it runs on a terminal; end the
// terminal (runInput.tty.end) when the run is over.
func commandInput(cfg *Config, sf *sandboxFlags) (runInput, error) {
	useTTY, err := sf.tty.want(os.Stdin, os.Stdout)
	if err != nil {
		return runInput{}, err
	}
	if cfg.Sandbox.Backend == "kubernetes" {
		if sf.tty.force {
			return runInput{}, fmt.Errorf("--tty: the kubernetes backend gives commands no terminal; use -T")
		}
		useTTY = false
	}
	var rio runInput
	if sf.interactive {
		rio.stdin = os.Stdin // -i=false: empty input
	}
	if useTTY {
		rio.tty = &hostTTY{in: os.Stdin, out: os.Stdout}
	}
	return rio, nil
}

// sandboxLogger is airlock's logger during a run: the command's own output matters here,
// so the proxy speaks up for warnings unless a config file sets the level.
func sandboxLogger(cmd *cobra.Command, cfg *Config) *slog.Logger {
	log := newLogger(cfg, os.Stderr)
	if cfg.Log.Level == "info" && !cmd.Flags().Changed("config") {
		cfg.Log.Level = "warn"
		log = newLogger(cfg, os.Stderr)
	}
	return log
}

// localBackend sets o.Backend to the docker backend (netns mode) or the native one, the
// latter once what sandboxes of earlier, dead airlocks left is removed. Call the returned
// function when the run is over.
func localBackend(ctx context.Context, cfg *Config, o *sandbox.Options) (func(), error) {
	if cfg.Sandbox.Backend == "docker" {
		if cfg.Sandbox.Image == "" {
			return nil, fmt.Errorf("--backend docker needs --image (a local image; nothing is pulled)")
		}
		b, err := dockerBackend(ctx, docker.Options{Image: cfg.Sandbox.Image, Runtime: cfg.Sandbox.Docker.Runtime})
		if err != nil {
			return nil, err
		}
		o.Backend = b
		return func() { b.Close() }, nil
	}
	n := &native.Native{AllowUnenforcedLimits: cfg.Sandbox.AllowUnenforcedLimits, CgroupParent: cfg.Sandbox.CgroupParent}
	if err := n.Cleanup(ctx); err != nil {
		return nil, fmt.Errorf("remove leftovers of earlier sandboxes: %w", err)
	}
	o.Backend = n
	return func() {}, nil
}

// serveAdmin serves the admin API (approvals page, metrics) on addr while the sandbox
// runs; nothing when addr is empty. Call the returned function to stop it.
func (s *stack) serveAdmin(addr string) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--admin-listen: %w", err)
	}
	s.proxy.AddSelf(ln.Addr())
	s.cfg.AdminListen = addr // the admin API answers to its name
	srv := admin.NewServer(s.adminHandler(), admin.ServerLimits{})
	go srv.Serve(ln)
	return func() { srv.Close() }, nil
}

// localOptions completes o with what the embedded proxy stack gives a sandbox: its CA,
// the proxy itself, the credential revoker, the logger and the audit of lifecycle events
// (the policy revision is the report's once the policy has loaded: runLocal).
func (s *stack) localOptions(o sandbox.Options) sandbox.Options {
	o.CABundle = caBundle(s.ca.CertPEM())
	o.Proxy = s.proxy
	if s.broker != nil {
		o.Revoker = s.broker
	}
	o.Logger = s.log
	o.OnEvent = s.lifecycleEvent
	return o
}

// runLocal runs args in a sandbox of o fronted by the embedded proxy, with its span and
// metrics, writes the patch (before Close: the copy-on-write layer goes with the sandbox)
// and the report (after), and returns the command's exit status as an exitCode error.
func (s *stack) runLocal(ctx context.Context, o sandbox.Options, args []string, rio runInput, out *postRun, raw bool) error {
	sb, err := sandbox.New(ctx, o)
	if err != nil {
		return err // sandbox.New names the sandbox and the step
	}
	if err := s.policyLoaded(ctx); err != nil {
		// Nothing ran in the sandbox: no command starts without its policy.
		_ = sb.Close(context.Background())
		return err
	}
	sb.SetPolicyRevision(s.engine.Revision())
	sayUnenforced(os.Stderr, sb)
	spanCtx, span := telemetry.StartSandboxSpan(ctx, s.telemetry.Tracer(), sb.ID(), o.Labels)
	s.telemetry.Metrics().SandboxStarted(spanCtx)
	s.fan.observe(sb.ID(), sb.Observe)
	stdout, stderr, done := commandOutput(raw)
	res, runErr := runCommand(ctx, sb, sandbox.Command{Args: args, Stdin: rio.stdin, Stdout: stdout, Stderr: stderr}, rio.tty)
	done()
	if out.patch != nil {
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
		s.log.Error("sandbox cleanup", "err", closeErr)
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

// systemRoots are where Debian and its relatives keep the system CA bundle.
var systemRoots = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

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
