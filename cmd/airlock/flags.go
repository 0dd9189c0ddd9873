package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// proxyFlags are the flags `airlock proxy` and `airlock sandbox run` share; they mean the
// same for both and override the config file.
type proxyFlags struct {
	config       string
	policy       string
	allowPrivate []string
	upstreamCA   string
	auditLog     string
	reportOnly   bool
	// proxy only
	listen      []string
	adminListen string
	requireAuth bool
	check       bool
}

func (f *proxyFlags) bindCommon(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "YAML config file (flags override it)")
	fl.StringVar(&f.policy, "policy", "", "policy directory, OPA bundle (.tar.gz) or bundle URL (default: the shipped policy)")
	fl.StringArrayVar(&f.allowPrivate, "allow-private", nil, "CIDR the dial guard may dial although private/loopback (repeatable)")
	fl.StringVar(&f.upstreamCA, "upstream-ca", "", "PEM file of extra roots for verifying upstream servers (system roots always apply)")
	fl.StringVar(&f.auditLog, "audit-log", "", `audit log file (default $AIRLOCK_HOME/audit.jsonl; "-" disables)`)
	fl.BoolVar(&f.reportOnly, "report-only", false, "rollout mode: let denied requests through and record them as would_deny (NOT enforcing)")
}

func (f *proxyFlags) bindProxy(cmd *cobra.Command) {
	f.bindCommon(cmd)
	fl := cmd.Flags()
	fl.StringArrayVar(&f.listen, "listen", nil, "proxy listener address (repeatable; default 127.0.0.1:3128)")
	fl.StringVar(&f.adminListen, "admin-listen", "", "admin API address: health, metrics, approvals (default 127.0.0.1:9090)")
	fl.BoolVar(&f.requireAuth, "require-auth", false, "answer 407 to requests without a proxy credential issued by airlock")
	fl.BoolVar(&f.check, "check", false, "validate the config and policy, then exit")
}

// flagKeys are the config keys a flag sets; an error about the key names the flag when
// the flag set it.
var flagKeys = map[string]string{
	"policy": "policy", "allow-private": "allow_private", "upstream-ca": "upstream_ca", "audit-log": "audit_log",
	"report-only": "report_only", "listen": "listen", "admin-listen": "admin_listen", "require-auth": "require_auth",
}

// load reads the config file and applies the flags that were set, then defaults, and
// validates the result. It reports every problem at once (configErrors): those of the file
// (unknown keys, values of the wrong type) and those Validate and checkSecretFiles find.
func (f *proxyFlags) load(cmd *cobra.Command) (*Config, *keyLines, error) {
	cfg, problems, err := f.loadProblems(cmd)
	if err != nil {
		return nil, nil, err
	}
	if len(problems) > 0 {
		return nil, nil, cfg.src.locate(errors.Join(problems...))
	}
	return cfg, cfg.src, nil
}

// loadProblems is load that returns the config (decoded as far as it could be, with
// defaults) along with its problems, unlocated; err is a file that cannot be read or
// parsed at all.
func (f *proxyFlags) loadProblems(cmd *cobra.Command) (*Config, []error, error) {
	cfg, kl, decoded, err := loadConfig(f.config)
	if err != nil {
		return nil, nil, err
	}
	ch := cmd.Flags().Changed
	if ch("policy") {
		cfg.Policy = f.policy
	}
	if ch("allow-private") {
		cfg.AllowPrivate = f.allowPrivate
	}
	if ch("upstream-ca") {
		cfg.UpstreamCA = f.upstreamCA
	}
	if ch("audit-log") {
		cfg.AuditLog = f.auditLog
	}
	if ch("report-only") {
		cfg.ReportOnly = f.reportOnly
	}
	if ch("listen") {
		cfg.Listen = f.listen
	}
	if ch("admin-listen") {
		cfg.AdminListen = f.adminListen
	}
	if ch("require-auth") {
		cfg.RequireAuth = f.requireAuth
	}
	kl.flags = map[string]string{}
	for flag, key := range flagKeys {
		if ch(flag) {
			kl.flags[key] = "--" + flag
		}
	}
	cfg.defaults()
	validated := leaves(cfg.Validate())
	validated = append(validated, dropShadowed(validated, leaves(checkSecretFiles(cfg.secretFiles())))...)
	cfg.src = kl
	return cfg, append(decoded, dropShadowed(decoded, validated)...), nil
}
