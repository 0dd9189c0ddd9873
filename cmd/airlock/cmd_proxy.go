package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/spf13/cobra"

	"github.com/airlock-proxy/airlock/admin"
	"github.com/airlock-proxy/airlock/internal/gctune"
)

func newProxyCmd() *cobra.Command {
	var f proxyFlags
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run the egress proxy",
		Long: `Run the proxy. Requests on --listen carry sandbox id "default" unless they present a proxy
credential airlock issued (Proxy-Authorization); --require-auth answers those with 407.
The admin API (--admin-listen) serves /healthz, /readyz, /metrics, /v1/policy and the
approvals API and page; never expose it to sandboxes. SIGHUP reloads the policy.`,
		Example: `  # shipped policy, defaults (proxy on 127.0.0.1:3128, admin on 127.0.0.1:9090)
  airlock proxy

  # your policy and config; let the proxy reach an internal network
  airlock proxy --config /etc/airlock/airlock.yaml --policy ./policy --allow-private 10.20.0.0/16

  # validate a config and policy without starting
  airlock proxy --config airlock.yaml --check`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.check {
				cfg, problems, err := f.loadProblems(cmd)
				if err != nil {
					return err
				}
				return checkConfig(cmd.Context(), cfg, problems, cmd)
			}
			cfg, _, err := f.load(cmd)
			if err != nil {
				return err
			}
			return runProxy(cmd, cfg, newLogger(cfg, os.Stderr))
		},
	}
	f.bindProxy(cmd)
	return cmd
}

// checkConfig is --check: the config's own problems (found loading it) and preflight's,
// the checks start-up runs short of binding and serving, all reported at once. Its output
// is for a person: the policy's messages below warnings are left out.
func checkConfig(ctx context.Context, cfg *Config, problems []error, cmd *cobra.Command) error {
	quiet := *cfg
	quiet.Log.Level = "warn"
	quiet.Log.Format = "text"
	eng, err := preflight(ctx, cfg, newLogger(&quiet, cmd.ErrOrStderr()))
	// A key already found wrong is not reported again by preflight, which saw its zero
	// value or default.
	problems = append(problems, dropShadowed(problems, leaves(err))...)
	if len(problems) > 0 {
		return cfg.src.locate(errors.Join(problems...))
	}
	if w := sessionsWarning(cfg); w != nil {
		for _, line := range errorLines(cfg.src.locate(w)) {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", line)
		}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "config OK; policy %s revision %s\n", eng.Status().Source, eng.Revision())
	return nil
}

func runProxy(cmd *cobra.Command, cfg *Config, log *slog.Logger) error {
	ctx := cmd.Context()
	s, err := build(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer s.close(context.Background())
	gctune.Start(gctune.Default) // from here on the heap is mostly what requests leave
	if m, err := s.startSessions(ctx, cmd); err != nil {
		log.Warn("sandbox sessions are not served", "err", err)
	} else {
		s.sessions = m
		// Before the stack closes: sandboxes end, and their leases are revoked, first.
		defer m.Close(context.Background())
	}
	s.revokeLeftLeases(ctx)
	if len(cfg.Approvals.Approvers) == 0 && cfg.Approvals.Service == "" {
		log.Warn("approvals: no approvers configured, so nobody can approve what the policy holds", "key", "approvals.approvers")
	}

	lns, adminLn, err := listenAll(cfg)
	if err != nil {
		return err
	}
	s.proxy.AddSelf(adminLn.Addr())
	adminSrv := admin.NewServer(s.adminHandler(), admin.ServerLimits{})

	watchCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.engine.Watch(watchCtx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go s.reloadOn(watchCtx, hup)

	errc := make(chan error, len(lns)+1)
	for _, ln := range lns {
		log.Info("proxy listening", "addr", ln.Addr().String(), "require_auth", cfg.RequireAuth)
		go func() { errc <- s.proxy.Serve(ln) }()
	}
	go func() {
		err := adminSrv.Serve(adminLn)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		errc <- err
	}()
	log.Info("admin API listening", "addr", adminLn.Addr().String(), "policy", s.engine.Status().Source, "revision", s.engine.Revision())

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	log.Info("shutting down")
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	_ = s.proxy.Shutdown(sctx)
	_ = adminSrv.Shutdown(sctx)
	return err
}

// listenAll opens the proxy's listeners (listen) and the admin API's (admin_listen).
func listenAll(cfg *Config) (lns []net.Listener, adminLn net.Listener, err error) {
	for _, addr := range cfg.Listen {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			closeListeners(lns)
			return nil, nil, fmt.Errorf("listen %s: %w", addr, err)
		}
		lns = append(lns, ln)
	}
	adminLn, err = net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		closeListeners(lns)
		return nil, nil, fmt.Errorf("admin_listen %s: %w", cfg.AdminListen, err)
	}
	return lns, adminLn, nil
}

func closeListeners(lns []net.Listener) {
	for _, ln := range lns {
		ln.Close()
	}
}

// reloadOn reloads the policy on every signal of hup until ctx ends; a policy that does
// not load is refused and the last good one stays.
func (s *stack) reloadOn(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-hup:
			if err := s.engine.Reload(ctx); err != nil {
				s.log.Error("policy reload refused; keeping the last good policy", "err", err)
			} else {
				s.log.Info("policy reloaded", "revision", s.engine.Revision())
			}
		case <-ctx.Done():
			return
		}
	}
}

func (s *stack) adminHandler() http.Handler {
	return admin.New(admin.Options{
		Ready: map[string]admin.Check{
			"policy": func(context.Context) error {
				if s.engine.Revision() == "" {
					return errors.New("no policy loaded")
				}
				return nil
			},
			"audit": func(context.Context) error {
				if s.audit == nil {
					return nil
				}
				return s.audit.Healthy()
			},
		},
		PolicyStatus: func() any { return s.engine.Status() },
		Metrics:      s.telemetry.MetricsHandler(),
		Credentials:  s.proxy,
		Issuers:      s.issuers,
		Logger:       s.log,
		Hosts:        append(slices.Clone(s.cfg.Admin.Hosts), listenHost(s.cfg.AdminListen)),
		MaxBodyBytes: s.cfg.Admin.MaxBodyBytes,
		Mount:        s.mounts(),
	})
}

func (s *stack) mounts() []func(chi.Router) {
	m := []func(chi.Router){func(r chi.Router) { s.approvals.Routes(r) }}
	if s.sessions != nil {
		m = append(m, s.sessionRoutes(s.sessions))
	}
	return m
}

// listenHost is the host part of a listen address ("localhost" of "localhost:9090").
func listenHost(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return h
}
