package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/internal/bearer"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/rego"
)

// preflight runs every check start-up makes beyond Validate that writes nothing: the
// policy loads and compiles, the CA (when it exists) loads, and every file the config
// names can be read and holds what it should (tokens of the right length, keys,
// certificates). `airlock proxy --check` is preflight; build runs it first and uses its
// policy engine, so that a config --check passes does not fail to start for a reason
// --check could have seen. What is left to start-up is what needs writing, binding or a
// network peer (the audit log, the approval store, Vault, the listeners). Every problem
// is reported (errors.Join), each naming its key.
func preflight(ctx context.Context, cfg *Config, log *slog.Logger) (*rego.Engine, error) {
	var errs []error
	eng, err := rego.New(ctx, policyOptions(cfg, log))
	if err != nil {
		errs = append(errs, fmt.Errorf("policy: %w", err))
	}
	dir := filepath.Join(cfg.Home, "ca")
	if _, err := os.Stat(filepath.Join(dir, "ca.pem")); err == nil {
		if _, err := ca.Load(dir); err != nil {
			errs = append(errs, fmt.Errorf("home: CA in %s: %w", dir, err))
		}
	}
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
	if cfg.PolicyConfig.BundlePublicKey != "" {
		if _, err := os.ReadFile(cfg.PolicyConfig.BundlePublicKey); err != nil {
			errs = append(errs, fmt.Errorf("policy_options.bundle_public_key: %w; want a readable PEM file", err))
		}
	}
	// Secret files the proxy reads later (Vault's, the approval service's, credentials'):
	// readable. The sandbox backends' issuer tokens are the client's, not the proxy's.
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
	if err := errors.Join(dedupe(errs)...); err != nil {
		return nil, err
	}
	return eng, nil
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
