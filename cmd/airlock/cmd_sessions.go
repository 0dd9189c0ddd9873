package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/go-chi/chi/v5"
	"github.com/spf13/cobra"

	"github.com/airlock-proxy/airlock/admin"
	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/image"
	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/session"
)

// startSessions makes the sandbox session manager of a proxy stack: its sandboxes use the
// stack's proxy, CA, Vault broker, policy (exec phase), approvals and audit log. Sessions
// left by an earlier run of this airlock are ended (see session.Manager.Adopt).
func (s *stack) startSessions(ctx context.Context, cmd *cobra.Command) (*session.Manager, error) {
	cfg := s.cfg
	mask, err := cfg.maskPaths()
	if err != nil {
		return nil, err
	}
	base := sandbox.Options{
		Pids: int64(cfg.Sandbox.Pids), CPUs: cfg.Sandbox.CPUs, AllowAIO: cfg.Sandbox.AllowAIO,
		ProtectedPaths: cfg.Sandbox.ProtectedPaths, HiddenPaths: cfg.hiddenPaths(configFile(cmd)), MaskPaths: mask,
		Nofile: int64(cfg.Sandbox.Nofile), Ptys: int64(cfg.Sandbox.Ptys), Inodes: int64(cfg.Sandbox.Inodes),
		CABundle: caBundle(s.ca.CertPEM()), Proxy: s.proxy, Logger: s.log, PolicyRevision: s.engine.Revision(),
		OnEvent: s.lifecycleEvent, Backend: &native.Native{AllowUnenforcedLimits: cfg.Sandbox.AllowUnenforcedLimits, CgroupParent: cfg.Sandbox.CgroupParent},
	}
	if cfg.Sandbox.Memory != "" {
		n, err := sandbox.ParseSize(cfg.Sandbox.Memory)
		if err != nil {
			return nil, fmt.Errorf("sandbox.memory: %w", err)
		}
		base.Memory = n
	}
	if s.broker != nil {
		base.Revoker = s.broker
	}
	var auditor session.Auditor
	if s.audit != nil {
		auditor = s.audit
	}
	sc := cfg.Sessions
	backends := &sessionBackends{native: base.Backend, runtime: cfg.Sandbox.Docker.Runtime, log: s.log,
		kube: cfg.Sandbox.Kubernetes, tokens: s.proxy}
	s.closers = append(s.closers, backends.close)
	m, err := session.New(session.Options{
		Base: base, Backend: backends.backend, Decider: s.engine, Approve: s.approvals, Auditor: auditor,
		Tracer: s.telemetry.Tracer(), Owner: sc.Owner, StateDir: sc.StateDir,
		TTL: sc.TTL, IdleTimeout: sc.IdleTimeout, MaxTTL: sc.MaxTTL, MaxIdleTimeout: sc.MaxIdleTimeout,
		MaxExecTimeout: cfg.Sandbox.Timeout, MaxSessions: sc.MaxSessions,
		MaxFileBytes: sc.maxFileBytes(), WorkspaceRoots: sc.WorkspaceRoots, Logger: s.log,
		RootfsRoots: sc.RootfsRoots, Images: &image.Cache{Dir: filepath.Join(cfg.Home, "images")},
		Started: func(sb *sandbox.Sandbox) { s.fan.observe(sb.ID(), sb.Observe) },
		Ended:   func(id string) { s.fan.forget(id) },
	}, s.execs)
	if err != nil {
		return nil, err
	}
	s.adoptSessions(ctx, m, backends)
	return m, nil
}

// adoptSessions takes over the sessions an earlier run of this airlock left (Docker ones
// alive, native and Kubernetes ones ended: see session.Manager.Adopt), then removes the
// Docker sandboxes of dead airlocks that none took over.
func (s *stack) adoptSessions(ctx context.Context, m *session.Manager, backends *sessionBackends) {
	adopted, ended, err := m.Adopt(ctx)
	if n, err := backends.removeDockerLeftovers(ctx); err != nil {
		s.log.Error("removing the docker sandboxes of dead airlocks", "err", err)
	} else if n > 0 {
		s.log.Warn("removed the docker sandboxes of dead airlocks that no session took over", "containers", n)
	}
	if err != nil {
		s.log.Error("taking over the sandbox sessions of an earlier run", "err", err)
	}
	if len(adopted) > 0 {
		s.log.Info("took over the sandbox sessions of an earlier run", "sandboxes", adopted)
	}
	if len(ended) > 0 {
		s.log.Warn("ended the sandbox sessions of an earlier run that could not be taken over (native sandboxes do not outlive their airlock); their reports are in sessions.state_dir", "sandboxes", ended)
	}
}

// revokeLeftLeases revokes in Vault the leases and tokens that airlock processes which
// crashed (a proxy, a one-shot sandbox run) left in the lease journal, except those of
// sandbox sessions still recorded in sessions.state_dir (taken over by this run, or left
// for the airlock of their name): those are revoked when the session ends. Called after
// the sessions were taken over.
func (s *stack) revokeLeftLeases(ctx context.Context) {
	if s.broker == nil {
		return
	}
	dir := s.cfg.Sessions.StateDir
	n, err := s.broker.RevokeLeft(ctx, func(id string) bool { return session.Recorded(dir, id) })
	if err != nil {
		s.log.Error("revoking the credentials earlier airlock runs left; what failed is tried again at the next start", "err", err)
	}
	if n > 0 {
		s.log.Warn("revoked the Vault leases and tokens of sandboxes that earlier airlock runs left", "credentials", n)
	}
}

// sessionRoutes mounts the sessions API behind issuer authentication.
func (s *stack) sessionRoutes(m *session.Manager) func(chi.Router) {
	return func(r chi.Router) {
		r.Group(func(r chi.Router) {
			r.Use(admin.RequireIssuer(s.issuers))
			m.Routes(r)
		})
	}
}

// lifecycleEvent records a sandbox's lifecycle event in the audit log.
func (s *stack) lifecycleEvent(ctx context.Context, ev sandbox.Event) {
	if s.audit == nil {
		return
	}
	// A one-shot run's policy may still be loading (buildStarted): the record waits for its
	// revision only as long as the run goes on.
	rev := ""
	if s.engine.Wait(ctx) == nil {
		rev = s.engine.Revision()
	}
	rec := audit.Event{Kind: event.Kind(ev.Kind), Decision: event.DecisionLifecycle, PolicyRev: rev,
		SandboxID: ev.SandboxID, Labels: ev.Labels, Status: ev.ExitCode}
	if ev.Error != "" {
		rec.ErrorClass = "sandbox"
	}
	if err := s.audit.Record(ctx, &rec); err != nil {
		s.log.Error("audit record failed", "err", err)
	}
}
