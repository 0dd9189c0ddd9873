package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/internal/redact"
	"github.com/airlock-proxy/airlock/secrets"
)

// Config is the one YAML config file. Keys mirror the flags; flags override the file.
type Config struct {
	Home         string                              `yaml:"home"`         // $AIRLOCK_HOME: CA, approval db, default audit log
	Listen       []string                            `yaml:"listen"`       // proxy listeners (shared; identity by credential)
	AdminListen  string                              `yaml:"admin_listen"` // admin API: health, metrics, approvals
	Admin        AdminConfig                         `yaml:"admin"`        // Host names and body bound of the admin API
	Policy       string                              `yaml:"policy"`       // directory, bundle .tar.gz, or bundle URL; "" = shipped
	PolicyConfig PolicyConfig                        `yaml:"policy_options"`
	ReportOnly   bool                                `yaml:"report_only"`   // rollout: denied requests pass as would_deny
	AllowPrivate []string                            `yaml:"allow_private"` // CIDRs the dial guard may dial
	UpstreamCA   string                              `yaml:"upstream_ca"`   // extra roots for upstream TLS
	RequireAuth  bool                                `yaml:"require_auth"`  // 407 without a proxy credential
	AuditLog     string                              `yaml:"audit_log"`     // "" = $AIRLOCK_HOME/audit.jsonl; "-" disables
	Audit        AuditConfig                         `yaml:"audit"`
	Limits       LimitsConfig                        `yaml:"limits"`
	Log          LogConfig                           `yaml:"log"`
	Telemetry    TelemetryConfig                     `yaml:"telemetry"` // exporters come from the OTEL_* variables
	Vault        secrets.VaultConfig                 `yaml:"vault"`
	Credentials  map[string]secrets.CredentialConfig `yaml:"credentials"`
	Approvals    approval.Config                     `yaml:"approvals"`
	Proxy        ProxyConfig                         `yaml:"proxy"`
	Sandbox      SandboxConfig                       `yaml:"sandbox"`
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
func (c *Config) Validate() error {
	for _, s := range c.AllowPrivate {
		if _, err := parsePrefix(s); err != nil {
			return fmt.Errorf("allow_private: %w", err)
		}
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log.level: %q: want debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		return fmt.Errorf("log.format: %q: want json or text", c.Log.Format)
	}
	switch c.Sandbox.Backend {
	case "native", "docker", "kubernetes":
	default:
		return fmt.Errorf("sandbox.backend: %q: want native, docker or kubernetes", c.Sandbox.Backend)
	}
	if err := c.Proxy.validate(); err != nil {
		return err
	}
	if err := c.Admin.validate(); err != nil {
		return err
	}
	if err := c.validatePolicy(); err != nil {
		return err
	}
	if err := c.Sandbox.validate(); err != nil {
		return err
	}
	if err := c.Approvals.Validate(); err != nil {
		return prefixKey("approvals", err)
	}
	if err := c.Vault.Validate(); err != nil {
		return prefixKey("vault", err)
	}
	if err := secrets.ValidateCredentials(c.Credentials); err != nil {
		return err
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

// configError is a config problem located in its file.
type configError struct {
	file string
	line int
	err  error
}

func (e *configError) Error() string {
	if e.line > 0 {
		return fmt.Sprintf("%s:%d: %v", e.file, e.line, e.err)
	}
	return fmt.Sprintf("%s: %v", e.file, e.err)
}

func (e *configError) Unwrap() error { return e.err }

// loadConfig reads path (if not "") strictly: unknown keys are errors with their line.
func loadConfig(path string) (*Config, *keyLines, error) {
	c := &Config{}
	kl := &keyLines{}
	if path == "" {
		return c, kl, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read config: %w", err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, nil, yamlError(path, err)
	}
	kl.file = path
	kl.walk(&root, "")
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, yamlError(path, err)
	}
	return c, kl, nil
}

var (
	yamlLineRE    = regexp.MustCompile(`^line (\d+): (.*)$`)
	yamlUnknownRE = regexp.MustCompile(`field (\S+) not found in type \S+`)
	yamlTypeRE    = regexp.MustCompile(`cannot unmarshal !!\w+ (.*) into (\S+)`)
)

// yamlError rewrites yaml.v3's errors as "file:line: what is wrong", one per line.
func yamlError(file string, err error) error {
	var msgs []string
	if te, ok := err.(*yaml.TypeError); ok {
		msgs = te.Errors
	} else {
		msgs = []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var out []string
	for _, m := range msgs {
		line := 0
		if sm := yamlLineRE.FindStringSubmatch(m); sm != nil {
			line, _ = strconv.Atoi(sm[1])
			m = sm[2]
		}
		m = yamlUnknownRE.ReplaceAllString(m, "unknown key $1")
		m = yamlTypeRE.ReplaceAllString(m, "$1 is not a valid $2")
		out = append(out, (&configError{file: file, line: line, err: errors.New(m)}).Error())
	}
	return errors.New(strings.Join(out, "\n"))
}

// keyLines maps dotted key paths of the config file to their lines, so that errors from
// Validate can say where the key is.
type keyLines struct {
	file  string
	lines map[string]int
}

func (k *keyLines) walk(n *yaml.Node, prefix string) {
	if k.lines == nil {
		k.lines = map[string]int{}
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			k.walk(c, prefix)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			if prefix != "" {
				key = prefix + "." + key
			}
			k.lines[key] = n.Content[i].Line
			k.walk(n.Content[i+1], key)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			key := fmt.Sprintf("%s[%d]", prefix, i)
			k.lines[key] = c.Line
			k.walk(c, key)
		}
	}
}

// locate wraps err with the file and line of the longest key path its message starts with.
func (k *keyLines) locate(err error) error {
	if err == nil || k == nil || k.file == "" {
		return err
	}
	msg := err.Error()
	best, line := "", 0
	for key, l := range k.lines {
		if len(key) > len(best) && strings.HasPrefix(msg, key) && (len(msg) == len(key) || strings.ContainsRune(":. [", rune(msg[len(key)]))) {
			best, line = key, l
		}
	}
	return &configError{file: k.file, line: line, err: err}
}

// maxRevocationCache bounds proxy.revocation_cache: a revoked credential must not work for
// long anywhere.
const maxRevocationCache = 10 * time.Second

func (p ProxyConfig) validate() error {
	if p.TokenTTL < 0 {
		return fmt.Errorf("proxy.token_ttl: must not be negative, got %s", p.TokenTTL)
	}
	if p.RevocationCache < 0 || p.RevocationCache > maxRevocationCache {
		return fmt.Errorf("proxy.revocation_cache: want 0 (default 1s) up to %s, got %s", maxRevocationCache, p.RevocationCache)
	}
	seen := map[string]bool{}
	for i, is := range p.Issuers {
		key := fmt.Sprintf("proxy.issuers[%d]", i)
		switch {
		case is.Name == "":
			return fmt.Errorf("%s.name: required", key)
		case seen[is.Name]:
			return fmt.Errorf("%s.name: %q is listed twice", key, is.Name)
		case is.TokenFile == "":
			return fmt.Errorf("%s.token_file: required", key)
		}
		seen[is.Name] = true
	}
	return nil
}

// hostName is a DNS name (labels of letters, digits and '-'), optionally ending in '.'.
var hostName = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*\.?$`)

func (a AdminConfig) validate() error {
	for i, h := range a.Hosts {
		if !hostName.MatchString(h) || len(h) > 253 {
			return fmt.Errorf("admin.hosts[%d]: %q: want a host name such as airlock-admin.airlock.svc (no scheme, port, path or wildcard)", i, h)
		}
	}
	if a.MaxBodyBytes < 0 {
		return fmt.Errorf("admin.max_body_bytes: must not be negative, got %d", a.MaxBodyBytes)
	}
	return nil
}

// validatePolicy refuses what rego.New would, naming the keys: an unsigned bundle over
// plain http without the opt-in, and negative bounds.
func (c *Config) validatePolicy() error {
	p := c.PolicyConfig
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
