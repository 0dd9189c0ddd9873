package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/internal/bearer"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/telemetry"
)

// preflight runs every check start-up makes short of binding, serving and reaching a
// network peer, and writes nothing: the policy loads and compiles; the CA (when it exists)
// loads, and $AIRLOCK_HOME, the audit log, the decision log and the approval store can be
// created or opened for writing where start-up would (checkPaths, without creating them);
// every file the config names can be read and holds what it should (tokens of the right
// length, keys, certificates); the parent proxy and the OTEL_* exporter choices from the
// environment parse.
// `airlock proxy --check` is preflight; build runs it first and uses its policy engine, so
// that a config --check passes does not fail to start for a reason --check could have
// seen. What is left to start-up is what needs a network peer (Vault, PostgreSQL) or a
// port. Every problem is reported (errors.Join), each naming its key.
func preflight(ctx context.Context, cfg *Config, log *slog.Logger) (*rego.Engine, error) {
	var errs []error
	eng, err := rego.New(ctx, policyOptions(cfg, log))
	if err != nil {
		errs = append(errs, fmt.Errorf("policy: %w", err))
	}
	if err := errors.Join(dedupe(append(errs, preflightErrors(cfg)...))...); err != nil {
		return nil, err
	}
	return eng, nil
}

// preflightWithoutPolicy is preflight without the policy.
func preflightWithoutPolicy(cfg *Config) error { return errors.Join(dedupe(preflightErrors(cfg))...) }

// preflightErrors are preflight's checks besides the policy.
func preflightErrors(cfg *Config) []error {
	var errs []error
	errs = append(errs, checkPaths(cfg)...)
	errs = append(errs, checkKeyFiles(cfg)...)
	errs = append(errs, checkSecretsReadable(cfg)...)
	// The parent proxy (its address from the config or the environment); the credential
	// that authenticates to it is checked with the credentials.
	pc := *cfg
	pc.UpstreamProxyAuth.Credential = ""
	if _, err := parentProxy(&pc, nil); err != nil {
		errs = append(errs, err)
	}
	if err := telemetry.CheckEnv(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// checkKeyFiles loads what start-up loads from files: the audit signing key, the approvers'
// and issuers' tokens, the credentials' HMAC keys and the CA certificates.
func checkKeyFiles(cfg *Config) []error {
	var errs []error
	if cfg.AuditLog != "-" && cfg.Audit.SigningKeyFile != "" {
		if _, err := audit.LoadSigningKey(cfg.Audit.SigningKeyFile); err != nil {
			errs = append(errs, fmt.Errorf("audit.signing_key_file: %w", err))
		}
	}
	approvers := make([]bearer.Entry, len(cfg.Approvals.Approvers))
	for i, a := range cfg.Approvals.Approvers {
		approvers[i] = bearer.Entry{Name: a.Name, File: a.TokenFile}
	}
	if _, err := bearer.Load("approvals.approvers", approvers); err != nil {
		errs = append(errs, err)
	}
	if _, err := loadIssuers(cfg.Proxy.Issuers); err != nil {
		errs = append(errs, err)
	}
	if _, err := tokenOptions(cfg.Proxy, nil); err != nil {
		errs = append(errs, err)
	}
	if cfg.UpstreamCA != "" {
		if _, err := proxy.LoadCAFile(cfg.UpstreamCA); err != nil {
			errs = append(errs, fmt.Errorf("upstream_ca: %w; want a PEM file of CA certificates", err))
		}
	}
	if cfg.Vault.CACert != "" && usesVault(cfg) {
		if _, err := proxy.LoadCAFile(cfg.Vault.CACert); err != nil {
			errs = append(errs, fmt.Errorf("vault.ca_cert: %w; want a PEM file of CA certificates", err))
		}
	}
	if cfg.PolicyConfig.BundlePublicKey != "" {
		if _, err := os.ReadFile(cfg.PolicyConfig.BundlePublicKey); err != nil {
			errs = append(errs, fmt.Errorf("policy_options.bundle_public_key: %w; want a readable PEM file", err))
		}
	}
	return errs
}

// usesVault: start-up connects to Vault only when a credential comes from it.
func usesVault(cfg *Config) bool {
	for _, c := range cfg.Credentials {
		if c.Vault != nil {
			return true
		}
	}
	return false
}

// checkSecretsReadable: the secret files the proxy reads later (Vault's, the approval
// service's, credentials') can be read. The sandbox backends' issuer tokens are the
// client's, not the proxy's.
func checkSecretsReadable(cfg *Config) []error {
	var errs []error
	for _, f := range cfg.secretFiles() {
		if strings.HasPrefix(f.key, "sandbox.") {
			continue
		}
		fh, err := os.Open(f.path)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w; want a readable file", f.key, err))
			continue
		}
		fh.Close()
	}
	return errs
}

// dedupe drops repeated problems (a token file that cannot be read is found twice: as an
// approver's token and as a secret file).
func dedupe(errs []error) []error {
	var out []error
	seen := map[string]bool{}
	keys := map[string]bool{}
	for _, e := range errs {
		for _, l := range leaves(e) {
			msg := l.Error()
			key := keyOf(msg, func(yield func(string) bool) {
				for k := range keys {
					if !yield(k) {
						return
					}
				}
			})
			if seen[msg] || key != "" {
				continue
			}
			seen[msg] = true
			if k, _, ok := cutKey(msg); ok {
				keys[k] = true
			}
			out = append(out, l)
		}
	}
	return out
}

// cutKey splits "key: rest".
func cutKey(msg string) (key, rest string, ok bool) {
	for i := 0; i+1 < len(msg); i++ {
		if msg[i] == ':' && msg[i+1] == ' ' {
			return msg[:i], msg[i+2:], true
		}
	}
	return "", "", false
}
