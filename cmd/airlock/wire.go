package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/internal/bearer"
	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/secrets"
	"github.com/airlock-proxy/airlock/session"
	"github.com/airlock-proxy/airlock/telemetry"
)

// stack is everything a running proxy is made of, built from a Config.
type stack struct {
	cfg       *Config
	log       *slog.Logger
	ca        *ca.CA
	engine    *rego.Engine
	audit     *audit.Sink
	broker    *secrets.Broker
	approvals *approval.Service
	store     approval.Store
	issuers   *bearer.Set
	proxy     *proxy.Proxy
	telemetry *telemetry.Telemetry
	execs     *session.Credentials // attributes session commands' requests
	sessions  *session.Manager     // nil when not served
	fan       *auditFanout
	closers   []func(context.Context) error
}

func policyOptions(cfg *Config, log *slog.Logger) rego.Options {
	pc := cfg.PolicyConfig
	o := rego.Options{Timeout: pc.Timeout, Poll: pc.Poll, Logger: log,
		AllowInsecureHTTP: pc.AllowInsecureHTTP, MaxBundleBytes: pc.MaxBundleBytes, MaxBundleFiles: pc.MaxBundleFiles}
	p := cfg.Policy
	switch {
	case p == "":
	case strings.HasPrefix(strings.ToLower(p), "http://") || strings.HasPrefix(strings.ToLower(p), "https://") || strings.HasSuffix(p, ".tar.gz") || strings.HasSuffix(p, ".tgz"):
		o.Bundle = p
	default:
		o.Dir = p
	}
	if cfg.PolicyConfig.BundlePublicKey != "" {
		o.BundleVerification = &rego.BundleVerification{PublicKey: cfg.PolicyConfig.BundlePublicKey}
	}
	return o
}

// auditOptions are the audit sink's options from the config.
func (c *Config) auditOptions(log *slog.Logger) audit.Options {
	return audit.Options{
		Path: c.AuditLog, Fsync: c.Audit.Fsync, GroupWindow: c.Audit.GroupWindow, FsyncInterval: c.Audit.FsyncInterval,
		RotateBytes: c.Audit.RotateBytes, SigningKeyFile: c.Audit.SigningKeyFile,
		CheckpointEvents: c.Audit.CheckpointEvents, CheckpointInterval: c.Audit.CheckpointInterval,
		OnFailure: c.Audit.OnFailure, BufferEvents: c.Audit.BufferEvents, Logger: log,
	}
}

// build makes every part; on error, what was made is closed.
func build(ctx context.Context, cfg *Config, log *slog.Logger) (*stack, error) {
	return buildWith(ctx, cfg, log, &auditFanout{})
}

// buildStarted is build with the policy still loading (rego.Start) when it returns, for a
// one-shot sandbox run, which creates its sandbox meanwhile: call s.policyLoaded before
// anything runs in it.
func buildStarted(ctx context.Context, cfg *Config, log *slog.Logger) (*stack, error) {
	return buildPolicy(ctx, cfg, log, &auditFanout{}, true)
}

// buildWith is build with the proxy's auditor going through fan, so that sandboxes can
// count their own requests.
func buildWith(ctx context.Context, cfg *Config, log *slog.Logger, fan *auditFanout) (*stack, error) {
	return buildPolicy(ctx, cfg, log, fan, false)
}

// policyLoaded waits for a policy that buildStarted left loading and says, as build would
// have, why it cannot be used.
func (s *stack) policyLoaded(ctx context.Context) error {
	if err := s.engine.Wait(ctx); err != nil {
		return s.cfg.src.locate(fmt.Errorf("policy: %w", err))
	}
	return nil
}

func buildPolicy(ctx context.Context, cfg *Config, log *slog.Logger, fan *auditFanout, start bool) (_ *stack, err error) {
	s := &stack{cfg: cfg, log: log}
	defer func() {
		if err != nil {
			s.close(context.Background())
		}
	}()
	// First, before anything is written: a config that preflight (airlock proxy --check)
	// refuses is refused here with the same words (the policy's, when it loads in the
	// background, by policyLoaded).
	if start {
		s.engine = rego.Start(ctx, policyOptions(cfg, log))
		err = preflightWithoutPolicy(cfg)
	} else {
		s.engine, err = preflight(ctx, cfg, log)
	}
	if err != nil {
		return nil, cfg.src.locate(err)
	}
	s.telemetry, err = telemetry.Setup(ctx, telemetry.Options{ServiceName: "airlock", Version: version, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	s.closers = append(s.closers, s.telemetry.Shutdown)
	s.ca, err = loadOrInitCA(cfg, log)
	if err != nil {
		return nil, err
	}
	auditor, err := s.openAudit(log)
	if err != nil {
		return nil, err
	}
	creds, err := s.openCredentials(ctx, log)
	if err != nil {
		return nil, err
	}
	if err := s.openApprovals(ctx, log); err != nil {
		return nil, err
	}
	tokens, err := tokenOptions(cfg.Proxy, s.store)
	if err != nil {
		return nil, err
	}
	if s.issuers, err = loadIssuers(cfg.Proxy.Issuers); err != nil {
		return nil, err
	}
	decider, err := s.decider(log)
	if err != nil {
		return nil, err
	}
	fan.metrics = s.telemetry.Metrics()
	fan.sink = auditor
	s.fan = fan
	s.execs = session.NewCredentials()
	if err := s.newProxy(decider, creds, tokens, log); err != nil {
		return nil, err
	}
	return s, nil
}

// newProxy makes the proxy of the parts built.
func (s *stack) newProxy(decider proxy.Decider, creds proxy.CredentialSource, tokens proxy.TokenOptions, log *slog.Logger) error {
	cfg := s.cfg
	opts := proxy.Options{
		Decider:        decider,
		BodyAware:      s.engine,
		CA:             s.ca,
		Credentials:    creds,
		Approver:       s.approvals,
		Execs:          s.execs,
		AllowPrivate:   allowPrivate(cfg),
		RequireAuth:    cfg.RequireAuth,
		Tokens:         tokens,
		ReportOnly:     cfg.ReportOnly,
		PolicyRevision: s.engine.Revision,
		Telemetry:      &proxy.OTel{T: s.telemetry, TrustClientTraceparent: cfg.Telemetry.TrustClientTraceparent},
		Logger:         log,
		Limits:         proxyLimits(cfg),
		Auditor:        s.fan,
	}
	var err error
	if opts.Parent, err = parentProxy(cfg, creds); err != nil {
		return err
	}
	if cfg.UpstreamCA != "" {
		opts.UpstreamCAs, err = proxy.LoadCAFile(cfg.UpstreamCA)
		if err != nil {
			return fmt.Errorf("upstream_ca: %w", err)
		}
	}
	s.proxy, err = proxy.New(opts)
	return err
}

// openAudit opens the audit log behind its refusal limit (nil: audit_log is "-").
func (s *stack) openAudit(log *slog.Logger) (proxy.Auditor, error) {
	cfg := s.cfg
	if cfg.AuditLog == "-" {
		return nil, nil
	}
	if err := os.MkdirAll(filepath.Dir(cfg.AuditLog), 0o700); err != nil {
		return nil, fmt.Errorf("audit_log: %w", err)
	}
	var err error
	s.audit, err = audit.Open(cfg.auditOptions(log))
	if err != nil {
		return nil, fmt.Errorf("audit_log: %w", err)
	}
	s.closers = append(s.closers, func(context.Context) error { return s.audit.Close() })
	limit := audit.NewRefusalLimit(s.audit, audit.RefusalLimitOptions{Burst: cfg.Audit.RefusalBurst,
		Interval: cfg.Audit.RefusalInterval, Summary: cfg.Audit.RefusalSummary})
	s.closers = append(s.closers, func(context.Context) error { return limit.Close() }) // before the sink
	return limit, nil
}

// openCredentials starts the secrets broker (nil: no credentials are configured).
func (s *stack) openCredentials(ctx context.Context, log *slog.Logger) (proxy.CredentialSource, error) {
	if len(s.cfg.Credentials) == 0 {
		return nil, nil
	}
	// What revokes each lease and token (never a value) outlives a crash here.
	journal, err := secrets.OpenJournal(filepath.Join(s.cfg.Home, "leases"))
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	journal.Logger = log.With("component", "secrets")
	s.broker, err = secrets.New(ctx, secrets.Options{
		Vault: s.cfg.Vault, Credentials: s.cfg.Credentials, Logger: log, Journal: journal,
		OnFetch: func(name string, cached bool, err error) {
			result := "miss"
			switch {
			case err != nil:
				result = "error"
			case cached:
				result = "hit"
			}
			s.telemetry.Metrics().VaultFetch(context.Background(), name, result)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	s.closers = append(s.closers, s.broker.Close)
	return s.broker, nil
}

// openApprovals opens the one store for approvals and the credential revocation list,
// and the approval service on it.
func (s *stack) openApprovals(ctx context.Context, log *slog.Logger) error {
	cfg := s.cfg
	if err := os.MkdirAll(cfg.Home, 0o700); err != nil {
		return fmt.Errorf("home %s: %w", cfg.Home, err)
	}
	var err error
	s.store, err = approval.OpenStore(ctx, cfg.Approvals.Store)
	if err != nil {
		return fmt.Errorf("approvals.store: %w", err)
	}
	s.closers = append(s.closers, func(context.Context) error { return s.store.Close() })
	s.approvals, err = approval.New(ctx, approval.Options{Config: cfg.Approvals, Store: s.store, Logger: log})
	if err != nil {
		return fmt.Errorf("approvals: %w", err)
	}
	s.closers = append(s.closers, func(context.Context) error { return s.approvals.Close() })
	return nil
}

// decider is the policy engine, writing to the decision log when there is one.
func (s *stack) decider(log *slog.Logger) (proxy.Decider, error) {
	if s.cfg.Audit.DecisionLog == "" {
		return s.engine, nil
	}
	dl, err := audit.OpenDecisionLog(s.cfg.Audit.DecisionLog, map[string]string{"app": "airlock", "version": version})
	if err != nil {
		return nil, fmt.Errorf("audit.decision_log: %w", err)
	}
	s.closers = append(s.closers, func(context.Context) error { return dl.Close() })
	return &decisionLogger{Decider: s.engine, log: dl, rev: s.engine.Revision, errs: log}, nil
}

// allowPrivate are the prefixes of allow_private (validated).
func allowPrivate(cfg *Config) []netip.Prefix {
	var allow []netip.Prefix
	for _, c := range cfg.AllowPrivate {
		p, _ := parsePrefix(c)
		allow = append(allow, p)
	}
	return allow
}

// proxyLimits are the proxy's bounds from limits and approvals.
func proxyLimits(cfg *Config) proxy.Limits {
	l := proxy.Limits{
		MaxHeaderBytes: cfg.Limits.MaxHeaderBytes, MaxBodyBytes: int64(cfg.Approvals.MaxBody),
		ReadHeaderTimeout: cfg.Limits.ReadHeaderTimeout, IdleTimeout: cfg.Limits.IdleTimeout,
		UpstreamHeaderTimeout: cfg.Limits.UpstreamHeaderTimeout,
		MaxInFlightPerSandbox: cfg.Limits.MaxInFlightPerSandbox, MaxConnsPerListener: cfg.Limits.MaxConnsPerListener,
		MaxRedactionsPerCredential: cfg.Limits.MaxRedactionsPerCredential,
		MaxPolicyBodyBytes:         cfg.Limits.MaxPolicyBodyBytes,
		MaxHeldPerSandbox:          cfg.Approvals.MaxPendingPerSandbox,
		MaxHeldBytesPerSandbox:     int64(cfg.Approvals.MaxHeldBytesPerSandbox),
		MaxHeldBytes:               int64(cfg.Approvals.MaxHeldBytes),
	}
	if cfg.Limits.MaxBodyBytes > 0 {
		l.MaxBodyBytes = cfg.Limits.MaxBodyBytes
	}
	return l
}

// tokenOptions reads proxy.token_key_file: signed credentials shared by replicas, revoked
// in store; no file, credentials in memory.
func tokenOptions(pc ProxyConfig, store approval.Store) (proxy.TokenOptions, error) {
	o := proxy.TokenOptions{TTL: pc.TokenTTL, RevocationCache: pc.RevocationCache}
	if pc.TokenKeyFile == "" {
		return o, nil
	}
	b, err := os.ReadFile(pc.TokenKeyFile)
	if err != nil {
		return o, fmt.Errorf("proxy.token_key_file: %w", err)
	}
	for i, line := range strings.Split(string(b), "\n") {
		k := strings.TrimSpace(line)
		if k == "" {
			continue
		}
		if len(k) < proxy.MinTokenKeyLen {
			return o, fmt.Errorf("proxy.token_key_file: %s line %d: a key of %d bytes; want at least %d (e.g. head -c 32 /dev/urandom | base64)",
				pc.TokenKeyFile, i+1, len(k), proxy.MinTokenKeyLen)
		}
		o.Keys = append(o.Keys, []byte(k))
	}
	if len(o.Keys) == 0 {
		return o, fmt.Errorf("proxy.token_key_file: %s holds no key", pc.TokenKeyFile)
	}
	o.Revocations = store
	return o, nil
}

func loadIssuers(cfgs []IssuerConfig) (*bearer.Set, error) {
	entries := make([]bearer.Entry, len(cfgs))
	for i, c := range cfgs {
		entries[i] = bearer.Entry{Name: c.Name, File: c.TokenFile}
	}
	return bearer.Load("proxy.issuers", entries)
}

func loadOrInitCA(cfg *Config, log *slog.Logger) (*ca.CA, error) {
	dir := filepath.Join(cfg.Home, "ca")
	c, created, err := ca.Init(dir)
	if err != nil {
		return nil, fmt.Errorf("CA in %s: %w", dir, err)
	}
	if created {
		log.Info("created airlock CA", "dir", dir)
	}
	return c, nil
}

// close stops the parts in reverse order: credentials are revoked before the audit log closes.
func (s *stack) close(ctx context.Context) error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		if err := s.closers[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	s.closers = nil
	return errors.Join(errs...)
}

// auditFanout passes each event to the audit sink and to the sandbox it belongs to (for
// the run report's counts).
type auditFanout struct {
	sink      proxy.Auditor // may be nil
	metrics   *telemetry.Metrics
	mu        sync.RWMutex
	observers map[string]func(decision event.Decision, host string)
}

func (f *auditFanout) observe(sandboxID string, fn func(decision event.Decision, host string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.observers == nil {
		f.observers = map[string]func(event.Decision, string){}
	}
	f.observers[sandboxID] = fn
}

func (f *auditFanout) forget(sandboxID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.observers, sandboxID)
}

func (f *auditFanout) Record(ctx context.Context, ev *audit.Event) error {
	f.mu.RLock()
	fn := f.observers[ev.SandboxID]
	f.mu.RUnlock()
	// An allowed CONNECT is followed by its requests, which are counted themselves; a
	// forwarded request is counted once, by its completion record.
	if fn != nil && !(ev.Kind == event.KindConnect && ev.Decision == event.DecisionAllow) && ev.Stage != audit.StageDecision {
		d := ev.Decision
		if d == event.DecisionApprove && ev.Approver != "" && ev.Status > 0 && ev.Status < 400 {
			d = event.DecisionApproved
		}
		fn(d, ev.Host)
	}
	if f.sink == nil {
		return nil
	}
	err := f.sink.Record(ctx, ev)
	if err != nil {
		f.metrics.AuditError(ctx)
	}
	return err
}

// decisionLogger also writes every decision in OPA's decision-log format.
type decisionLogger struct {
	proxy.Decider
	log  *audit.DecisionLog
	rev  func() string
	errs *slog.Logger
}

func (d *decisionLogger) Decide(ctx context.Context, in *rego.Input) (rego.Decision, error) {
	dec, err := d.Decider.Decide(ctx, in)
	var result any = dec
	if err != nil {
		result = map[string]string{"error": "no decision (denied)"}
	}
	if lerr := d.log.RecordDecision(ctx, audit.Decision{Input: in, Result: result, Bundles: map[string]string{"airlock": d.rev()}}); lerr != nil {
		d.errs.Error("decision log write failed", "err", lerr)
	}
	return dec, err
}
