package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/internal/redact"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/secrets"
)

// Config is the one YAML config file. Keys mirror the flags; flags override the file.
type Config struct {
	Home         string       `yaml:"home"`         // $AIRLOCK_HOME: CA, approval db, default audit log
	Listen       []string     `yaml:"listen"`       // proxy listeners (shared; identity by credential)
	AdminListen  string       `yaml:"admin_listen"` // admin API: health, metrics, approvals
	Admin        AdminConfig  `yaml:"admin"`        // Host names and body bound of the admin API
	Policy       string       `yaml:"policy"`       // directory, bundle .tar.gz, or bundle URL; "" = shipped
	PolicyConfig PolicyConfig `yaml:"policy_options"`
	ReportOnly   bool         `yaml:"report_only"`   // rollout: denied requests pass as would_deny
	AllowPrivate []string     `yaml:"allow_private"` // CIDRs the dial guard may dial
	UpstreamCA   string       `yaml:"upstream_ca"`   // extra roots for upstream TLS
	// UpstreamProxy sends airlock's own outbound connections through a parent HTTP proxy
	// (CONNECT); "" uses HTTPS_PROXY/NO_PROXY of airlock's environment, "none" none at all.
	UpstreamProxy     string                              `yaml:"upstream_proxy"`
	UpstreamNoProxy   string                              `yaml:"upstream_no_proxy"`   // NO_PROXY syntax; "" = $NO_PROXY
	UpstreamProxyAuth UpstreamProxyAuth                   `yaml:"upstream_proxy_auth"` // user:password for the parent
	RequireAuth       bool                                `yaml:"require_auth"`        // 407 without a proxy credential
	AuditLog          string                              `yaml:"audit_log"`           // "" = $AIRLOCK_HOME/audit.jsonl; "-" disables
	Audit             AuditConfig                         `yaml:"audit"`
	Limits            LimitsConfig                        `yaml:"limits"`
	Log               LogConfig                           `yaml:"log"`
	Telemetry         TelemetryConfig                     `yaml:"telemetry"` // exporters come from the OTEL_* variables
	Vault             secrets.VaultConfig                 `yaml:"vault"`
	Credentials       map[string]secrets.CredentialConfig `yaml:"credentials"`
	Approvals         approval.Config                     `yaml:"approvals"`
	Proxy             ProxyConfig                         `yaml:"proxy"`
	Sandbox           SandboxConfig                       `yaml:"sandbox"`
	Sessions          SessionsConfig                      `yaml:"sessions"` // sandbox sessions served by airlock proxy

	// src locates the keys of the file the config was read from (and the flags that
	// set keys), for errors found after loading; nil: none.
	src *keyLines
}

// ProxyConfig is about the per-sandbox proxy credentials the proxy issues.
type ProxyConfig struct {
	// TokenKeyFile holds the HMAC key(s) that sign credentials, one per line (at least 32
	// bytes each; the first signs, all verify). Set, every replica with the same file
	// accepts a credential any of them issued, and revocations go to the approval store.
	// Unset, credentials live in this process's memory (one proxy).
	TokenKeyFile string `yaml:"token_key_file"`
	// TokenTTL is the longest life of a credential; default 24h with a key, none without.
	TokenTTL time.Duration `yaml:"token_ttl"`
	// RevocationCache bounds how long a credential revoked through another replica may
	// still work on this one; default 1s, at most 10s.
	RevocationCache time.Duration `yaml:"revocation_cache"`
	// Issuers may issue and revoke credentials through the admin API
	// (POST/DELETE /v1/sandboxes/{id}/token) with a bearer token read from a file. They are
	// not approvers: whoever starts sandboxes should not approve their requests.
	Issuers []IssuerConfig `yaml:"issuers"`
}

// IssuerConfig names a component that starts sandboxes (an orchestrator, `airlock sandbox
// run --backend kubernetes`) and where its token is.
type IssuerConfig struct {
	Name      string `yaml:"name"`
	TokenFile string `yaml:"token_file"`
}

// PolicyConfig tunes the policy engine.
type PolicyConfig struct {
	Timeout         time.Duration `yaml:"timeout"`           // per evaluation; default 250ms
	Poll            time.Duration `yaml:"poll"`              // bundle polling; default 1m
	BundlePublicKey string        `yaml:"bundle_public_key"` // PEM file: bundles must be signed
	// AllowInsecureHTTP lets an unsigned bundle load from a plain http:// URL (anyone on the
	// path could replace the policy); without it such a URL is refused.
	AllowInsecureHTTP bool `yaml:"allow_insecure_http"`
	// MaxBundleBytes bounds a bundle, compressed and uncompressed (default 64 MiB);
	// MaxBundleFiles the files in it (default 10000).
	MaxBundleBytes int64 `yaml:"max_bundle_bytes"`
	MaxBundleFiles int   `yaml:"max_bundle_files"`
}

// AdminConfig protects the admin listener.
type AdminConfig struct {
	// Hosts are the names the admin API answers to besides IP addresses, localhost and the
	// name in admin_listen: the names clients use to reach it (a Service's DNS names).
	// Requests with any other Host get 421, which defeats DNS rebinding.
	Hosts []string `yaml:"hosts"`
	// MaxBodyBytes bounds every request body on the admin API; default 1 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
}

// AuditConfig tunes the hash-chained audit log (audit.Options).
type AuditConfig struct {
	Fsync              string        `yaml:"fsync"`        // group (default) | always | interval | never
	GroupWindow        time.Duration `yaml:"group_window"` // fsync group: bound on the wait for an fsync; default 2ms
	FsyncInterval      time.Duration `yaml:"fsync_interval"`
	RotateBytes        int64         `yaml:"rotate_bytes"`
	SigningKeyFile     string        `yaml:"signing_key_file"`
	CheckpointEvents   int           `yaml:"checkpoint_events"`
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	OnFailure          string        `yaml:"on_failure"` // block | buffer
	BufferEvents       int           `yaml:"buffer_events"`
	DecisionLog        string        `yaml:"decision_log"` // optional OPA decision-log JSONL
	// Refusals of one sandbox are written one by one up to RefusalBurst at once, then one per
	// RefusalInterval; the rest are counted and written as one summary per sandbox and rule
	// every RefusalSummary (audit.RefusalLimit). Forwarded requests are always one by one.
	RefusalBurst    int           `yaml:"refusal_burst"`    // default 100
	RefusalInterval time.Duration `yaml:"refusal_interval"` // default 1s
	RefusalSummary  time.Duration `yaml:"refusal_summary"`  // default 1m
}

// LimitsConfig bounds what one client can make the proxy hold.
type LimitsConfig struct {
	MaxHeaderBytes        int           `yaml:"max_header_bytes"`
	MaxBodyBytes          int64         `yaml:"max_body_bytes"`
	ReadHeaderTimeout     time.Duration `yaml:"read_header_timeout"`
	IdleTimeout           time.Duration `yaml:"idle_timeout"`
	UpstreamHeaderTimeout time.Duration `yaml:"upstream_header_timeout"`
	MaxInFlightPerSandbox int           `yaml:"max_inflight_per_sandbox"`
	MaxConnsPerListener   int           `yaml:"max_conns_per_listener"`
	// MaxRedactionsPerCredential is how many times the scrubber may redact one credential
	// in one sandbox's responses before that sandbox may no longer use it (403).
	MaxRedactionsPerCredential int `yaml:"max_redactions_per_credential"`
	// MaxPolicyBodyBytes bounds the body of a request to a body-aware destination
	// (data.body_aware in the policy); default 1 MiB, larger bodies get 413.
	MaxPolicyBodyBytes int64 `yaml:"max_policy_body_bytes"`
}

// TelemetryConfig tunes spans; where they go is set by the standard OTEL_* variables.
type TelemetryConfig struct {
	// TrustClientTraceparent makes a sandbox's traceparent the parent of airlock's span
	// instead of a link (only when the sandboxes' traces are trusted).
	TrustClientTraceparent bool `yaml:"trust_client_traceparent"`
}

// LogConfig sets the proxy's own log.
type LogConfig struct {
	Level  string `yaml:"level"`  // debug | info | warn | error
	Format string `yaml:"format"` // json | text
}

// defaults fills in what neither the file nor the flags set.
func (c *Config) defaults() {
	if c.Home == "" {
		c.Home = os.Getenv("AIRLOCK_HOME")
	}
	if c.Home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			h = os.TempDir()
		}
		c.Home = filepath.Join(h, ".local", "state", "airlock")
	}
	if len(c.Listen) == 0 {
		c.Listen = []string{"127.0.0.1:3128"}
	}
	if c.AdminListen == "" {
		c.AdminListen = "127.0.0.1:9090"
	}
	if c.AuditLog == "" {
		c.AuditLog = filepath.Join(c.Home, "audit.jsonl")
	}
	if c.Approvals.Store == "" {
		c.Approvals.Store = approval.DefaultStore(c.Home)
	}
	c.Approvals = c.Approvals.WithDefaults()
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	if c.Log.Format == "" {
		c.Log.Format = "json"
	}
	if c.Sandbox.Backend == "" {
		c.Sandbox.Backend = "native"
	}
}

// Validate names the key at fault.
// UpstreamProxyAuth names where the parent proxy's credential comes from (one of them):
// "user:password" in an environment variable or a file, or a configured credential
// (credentials.NAME, from Vault, env or file) whose injection gives the header.
type UpstreamProxyAuth struct {
	Env        string `yaml:"env"`
	File       string `yaml:"file"`
	Credential string `yaml:"credential"`
}

// Validate reports every problem it finds, each naming the key at fault (errors.Join).
func (c *Config) Validate() error {
	errs := c.networkErrors()
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("log.level: %q is not a level; want debug, info, warn or error", c.Log.Level))
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		errs = append(errs, fmt.Errorf("log.format: %q is not a format; want json or text", c.Log.Format))
	}
	switch c.Sandbox.Backend {
	case "native", "docker", "kubernetes":
	default:
		errs = append(errs, fmt.Errorf("sandbox.backend: %q is not a backend; want native, docker or kubernetes", c.Sandbox.Backend))
	}
	switch {
	case c.Audit.RefusalBurst < 0:
		errs = append(errs, fmt.Errorf("audit.refusal_burst: must not be negative, got %d", c.Audit.RefusalBurst))
	case c.Audit.RefusalInterval < 0:
		errs = append(errs, fmt.Errorf("audit.refusal_interval: must not be negative, got %s", c.Audit.RefusalInterval))
	case c.Audit.RefusalSummary < 0:
		errs = append(errs, fmt.Errorf("audit.refusal_summary: must not be negative, got %s", c.Audit.RefusalSummary))
	}
	if c.AuditLog != "-" {
		o := c.auditOptions(nil)
		errs = append(errs, o.Check())
	}
	errs = append(errs, c.Proxy.validate(), c.Admin.validate(), c.validatePolicy(), c.Sandbox.validate(), c.Sessions.validate())
	if err := c.Approvals.Validate(); err != nil {
		for _, e := range leaves(err) {
			errs = append(errs, prefixKey("approvals", e))
		}
	}
	if err := c.Vault.Validate(); err != nil {
		errs = append(errs, prefixKey("vault", err))
	}
	errs = append(errs, secrets.ValidateCredentials(c.Credentials))
	return errors.Join(errs...)
}

// networkErrors are the problems of the upstream proxy, private ranges and listen
// addresses, each naming its key.
func (c *Config) networkErrors() []error {
	var errs []error
	if c.UpstreamProxy != "" && c.UpstreamProxy != "none" {
		if _, err := proxy.ParseParentURL(c.UpstreamProxy); err != nil {
			errs = append(errs, fmt.Errorf("upstream_proxy: %w", err))
		}
	}
	if a := c.UpstreamProxyAuth; (a.Env != "") && (a.File != "") || (a.Credential != "" && (a.Env != "" || a.File != "")) {
		errs = append(errs, fmt.Errorf("upstream_proxy_auth: set one of env, file or credential"))
	}
	if n := c.UpstreamProxyAuth.Credential; n != "" {
		if _, ok := c.Credentials[n]; !ok {
			errs = append(errs, fmt.Errorf("upstream_proxy_auth.credential: %q is not in credentials", n))
		}
	}
	for i, s := range c.AllowPrivate {
		if _, err := parsePrefix(s); err != nil {
			errs = append(errs, fmt.Errorf("allow_private[%d]: %w", i, err))
		}
	}
	for i, a := range c.Listen {
		if err := checkListenAddr(a); err != nil {
			errs = append(errs, fmt.Errorf("listen[%d]: %w", i, err))
		}
	}
	if err := checkListenAddr(c.AdminListen); err != nil {
		errs = append(errs, fmt.Errorf("admin_listen: %w", err))
	}
	return errs
}

// checkListenAddr checks a listen address as net.Listen will take it, so that a bad one is
// reported with the config's other problems (and by --check) rather than at start.
func checkListenAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not an address; want HOST:PORT such as 127.0.0.1:3128", addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port %s is out of range; want HOST:PORT with a port from 1 to 65535 (0: any free port)", addr, port)
	}
	if host != "" && !hostName.MatchString(host) {
		if _, err := netip.ParseAddr(host); err != nil {
			return fmt.Errorf("%q: %q is neither an IP address nor a host name; want HOST:PORT such as 127.0.0.1:3128", addr, host)
		}
	}
	return nil
}

// prefixKey makes an error from a section's Validate name the full key.
func prefixKey(section string, err error) error {
	msg := err.Error()
	if strings.HasPrefix(msg, section+".") || strings.HasPrefix(msg, section+":") || strings.HasPrefix(msg, section+" ") {
		return err
	}
	return fmt.Errorf("%s.%w", section, err)
}

// parsePrefix accepts a CIDR or a single address.
func parsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR (10.0.0.0/8) or an address", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// loadConfig reads path (if not "") strictly. Problems of the file itself (unknown keys,
// values of the wrong type) come back as problems, every one of them, with the config
// decoded as far as it could be; err is a file that cannot be read or parsed at all.
func loadConfig(path string) (c *Config, kl *keyLines, problems []error, err error) {
	c = &Config{}
	kl = &keyLines{}
	if path == "" {
		return c, kl, nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read config: %w", err)
	}
	kl.file = path
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, nil, nil, configErrors(kl.decodeErrors(err))
	}
	kl.walk(&root, "", reflect.TypeFor[Config]())
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, nil, nil, configErrors(kl.decodeErrors(err))
		}
		problems = kl.decodeErrors(te)
	}
	return c, kl, problems, nil
}

// maxRevocationCache bounds proxy.revocation_cache: a revoked credential must not work for
// long anywhere.
const maxRevocationCache = 10 * time.Second

func (p ProxyConfig) validate() error {
	var errs []error
	if p.TokenTTL < 0 {
		errs = append(errs, fmt.Errorf("proxy.token_ttl: %s is negative; want a positive duration such as 24h", p.TokenTTL))
	}
	if p.RevocationCache < 0 || p.RevocationCache > maxRevocationCache {
		errs = append(errs, fmt.Errorf("proxy.revocation_cache: %s is out of range; want 0 (default 1s) up to %s", p.RevocationCache, maxRevocationCache))
	}
	seen := map[string]bool{}
	for i, is := range p.Issuers {
		key := fmt.Sprintf("proxy.issuers[%d]", i)
		switch {
		case is.Name == "":
			errs = append(errs, fmt.Errorf("%s.name: missing; want the issuer's name", key))
		case seen[is.Name]:
			errs = append(errs, fmt.Errorf("%s.name: %q is listed twice; want each issuer once", key, is.Name))
		}
		if is.TokenFile == "" {
			errs = append(errs, fmt.Errorf("%s.token_file: missing; want the file holding the issuer's token", key))
		}
		seen[is.Name] = true
	}
	return errors.Join(errs...)
}

// hostName is a DNS name (labels of letters, digits and '-'), optionally ending in '.'.
var hostName = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*\.?$`)

func (a AdminConfig) validate() error {
	var errs []error
	for i, h := range a.Hosts {
		if !hostName.MatchString(h) || len(h) > 253 {
			errs = append(errs, fmt.Errorf("admin.hosts[%d]: %q is not a host name; want one such as airlock-admin.airlock.svc (no scheme, port, path or wildcard)", i, h))
		}
	}
	if a.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("admin.max_body_bytes: %d is negative; want a size in bytes (default 1048576)", a.MaxBodyBytes))
	}
	return errors.Join(errs...)
}

// validatePolicy refuses what rego.New would, naming the keys: an unsigned bundle over
// plain http without the opt-in, and negative bounds.
func (c *Config) validatePolicy() error {
	p := c.PolicyConfig
	lower := strings.ToLower(c.Policy)
	isURL := strings.HasPrefix(lower, "http://") || strings.HasPrefix(lower, "https://")
	if fi, err := os.Stat(c.Policy); c.Policy != "" && !isURL && err == nil && !fi.IsDir() && !strings.HasSuffix(lower, ".tar.gz") && !strings.HasSuffix(lower, ".tgz") {
		return fmt.Errorf("policy: %s is a file, not a policy; want a directory holding .rego files, an OPA bundle (.tar.gz) or a bundle URL", c.Policy)
	}
	switch {
	case p.MaxBundleBytes < 0:
		return fmt.Errorf("policy_options.max_bundle_bytes: must not be negative, got %d", p.MaxBundleBytes)
	case p.MaxBundleFiles < 0:
		return fmt.Errorf("policy_options.max_bundle_files: must not be negative, got %d", p.MaxBundleFiles)
	case strings.HasPrefix(strings.ToLower(c.Policy), "http://") && p.BundlePublicKey == "" && !p.AllowInsecureHTTP:
		return fmt.Errorf("policy: %s is plain http and bundles need no signature, so anyone on the network path could replace the policy: "+
			"use https, set policy_options.bundle_public_key, or accept the risk with policy_options.allow_insecure_http: true", redact.URL(c.Policy))
	}
	return nil
}
