package approval

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Defaults for Config fields left at their zero value.
const (
	DefaultTimeout     = 5 * time.Minute
	DefaultRetryWindow = 2 * time.Minute
	// DefaultMaxBody is the largest request body the proxy buffers for a held request;
	// larger bodies are refused with 413 before Hold is called.
	DefaultMaxBody     ByteSize = 1 << 20
	DefaultBodyPreview ByteSize = 16 << 10
	// DefaultMaxPendingPerSandbox is how many requests one sandbox may have waiting for a
	// decision at once (more: 429).
	DefaultMaxPendingPerSandbox = 16
	// DefaultMaxHeldBytesPerSandbox bounds the bodies one sandbox's waiting requests keep in
	// airlock's memory together (more: 413).
	DefaultMaxHeldBytesPerSandbox ByteSize = 8 << 20
	// DefaultMaxHeldBytes bounds the bodies of all waiting requests together (more: 413).
	DefaultMaxHeldBytes ByteSize = 256 << 20
	// DefaultSessionTTL is how long an approval page sign-in lasts.
	DefaultSessionTTL = 12 * time.Hour
	// DefaultWebhookBurst webhooks per sandbox may go out at once; then one per
	// DefaultWebhookInterval.
	DefaultWebhookBurst    = 5
	DefaultWebhookInterval = 30 * time.Second
	// DefaultMaxHeaderBytes bounds the names and values of a held request's headers
	// together (more: 431): they are kept in the store while it waits.
	DefaultMaxHeaderBytes ByteSize = 16 << 10
	// DefaultNewBurst approval records per sandbox may be created at once; then one per
	// DefaultNewInterval (more: 429).
	DefaultNewBurst    = 30
	DefaultNewInterval = 20 * time.Second
	// DefaultRetention is how long an ended record is kept before it is deleted.
	DefaultRetention = 30 * 24 * time.Hour
	// DefaultStoreFile is the SQLite file name under $AIRLOCK_HOME.
	DefaultStoreFile = "approvals.db"
)

// Config is the `approvals:` section of the airlock config file.
type Config struct {
	// Timeout is how long a held request waits for a decision (a rule may set its own).
	Timeout Duration `yaml:"timeout"`
	// Store is "sqlite:PATH" (the default, under $AIRLOCK_HOME) or "postgres://…".
	Store string `yaml:"store"`
	// Webhook receives a POST for each new approval.
	Webhook string `yaml:"webhook"`
	// WebhookFormat is "json" (the record) or "slack" ({"text": …}).
	WebhookFormat string `yaml:"webhook_format"`
	// Service is an external approval service: it is sent each new record and answers with a
	// decision, or 202 and decides later through the admin API.
	Service string `yaml:"service"`
	// ServiceTokenFile holds a bearer token sent to Service (optional).
	ServiceTokenFile string `yaml:"service_token_file"`
	// PageURL is the public address of the approval page, linked from notifications.
	PageURL string `yaml:"page_url"`
	// Approvers may decide through the admin API, each with a bearer token read from a file.
	Approvers []ApproverConfig `yaml:"approvers"`
	// RetryWindow: a request identical to one approved less than this long ago is let
	// through once without a second prompt. 0 means the default; negative disables it.
	RetryWindow Duration `yaml:"retry_window"`
	// MaxBody is the largest body the proxy buffers for a held request.
	MaxBody ByteSize `yaml:"max_body"`
	// BodyPreview is how many bytes of the body the page, the record and notifications show
	// inline (the whole body is always downloadable).
	BodyPreview ByteSize `yaml:"body_preview"`
	// MaxPendingPerSandbox bounds the requests one sandbox has waiting at once (more: 429).
	MaxPendingPerSandbox int `yaml:"max_pending_per_sandbox"`
	// MaxHeldBytesPerSandbox bounds the body bytes one sandbox's waiting requests hold in
	// memory together (more: 413).
	MaxHeldBytesPerSandbox ByteSize `yaml:"max_held_bytes_per_sandbox"`
	// MaxHeldBytes bounds the body bytes all waiting requests hold together (more: 413).
	MaxHeldBytes ByteSize `yaml:"max_held_bytes"`
	// SessionTTL is how long an approval page sign-in lasts (sign-out ends it sooner).
	SessionTTL Duration `yaml:"session_ttl"`
	// WebhookBurst webhooks per sandbox go out at once, then one per WebhookInterval; the
	// rest are suppressed (counted, logged, and the approval still waits on the page).
	WebhookBurst    int      `yaml:"webhook_burst"`
	WebhookInterval Duration `yaml:"webhook_interval"`
	// MaxHeaderBytes bounds a held request's header names and values together (more: 431).
	MaxHeaderBytes ByteSize `yaml:"max_header_bytes"`
	// NewBurst approval records per sandbox may be created at once, then one per
	// NewInterval; past that a request that needs approval gets 429 (per replica).
	NewBurst    int      `yaml:"new_per_sandbox_burst"`
	NewInterval Duration `yaml:"new_per_sandbox_interval"`
	// Retention is how long ended records are kept (then deleted); negative keeps them.
	Retention Duration `yaml:"retention"`
}

// ApproverConfig names a person or service that may decide, and where its token is.
type ApproverConfig struct {
	Name      string `yaml:"name"`
	TokenFile string `yaml:"token_file"`
}

// DefaultStore is the store used when none is configured: an SQLite file in home.
func DefaultStore(home string) string { return "sqlite:" + filepath.Join(home, DefaultStoreFile) }

// WithDefaults returns c with every zero field set to its default. Store stays empty when
// unset: the caller knows $AIRLOCK_HOME (see DefaultStore).
func (c Config) WithDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = Duration(DefaultTimeout)
	}
	if c.RetryWindow == 0 {
		c.RetryWindow = Duration(DefaultRetryWindow)
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.BodyPreview == 0 {
		c.BodyPreview = DefaultBodyPreview
	}
	if c.MaxPendingPerSandbox == 0 {
		c.MaxPendingPerSandbox = DefaultMaxPendingPerSandbox
	}
	if c.MaxHeldBytesPerSandbox == 0 {
		c.MaxHeldBytesPerSandbox = max(DefaultMaxHeldBytesPerSandbox, c.MaxBody)
	}
	if c.MaxHeldBytes == 0 {
		c.MaxHeldBytes = max(DefaultMaxHeldBytes, c.MaxHeldBytesPerSandbox)
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = Duration(DefaultSessionTTL)
	}
	if c.WebhookBurst == 0 {
		c.WebhookBurst = DefaultWebhookBurst
	}
	if c.WebhookInterval == 0 {
		c.WebhookInterval = Duration(DefaultWebhookInterval)
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if c.NewBurst == 0 {
		c.NewBurst = DefaultNewBurst
	}
	if c.NewInterval == 0 {
		c.NewInterval = Duration(DefaultNewInterval)
	}
	if c.Retention == 0 {
		c.Retention = Duration(DefaultRetention)
	}
	if c.WebhookFormat == "" {
		c.WebhookFormat = "json"
	}
	return c
}

// Validate reports every problem (errors.Join), each naming its key under `approvals.`.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Timeout < 0 {
		bad("approvals.timeout: %s is negative; want a duration such as 5m", c.Timeout)
	}
	if c.MaxBody < 0 {
		bad("approvals.max_body: %d is negative; want a size such as 1MiB", c.MaxBody)
	}
	if c.BodyPreview < 0 {
		bad("approvals.body_preview: %d is negative; want a size such as 16KiB", c.BodyPreview)
	}
	for _, f := range []struct {
		key string
		v   int64
	}{{"max_pending_per_sandbox", int64(c.MaxPendingPerSandbox)}, {"max_held_bytes_per_sandbox", int64(c.MaxHeldBytesPerSandbox)},
		{"max_held_bytes", int64(c.MaxHeldBytes)}, {"session_ttl", int64(c.SessionTTL)},
		{"webhook_burst", int64(c.WebhookBurst)}, {"webhook_interval", int64(c.WebhookInterval)},
		{"max_header_bytes", int64(c.MaxHeaderBytes)}, {"new_per_sandbox_burst", int64(c.NewBurst)},
		{"new_per_sandbox_interval", int64(c.NewInterval)}} {
		if f.v < 0 {
			bad("approvals.%s: %d is negative; want 0 (the default) or more", f.key, f.v)
		}
	}
	if c.MaxHeldBytesPerSandbox > 0 && c.MaxHeldBytesPerSandbox < c.MaxBody {
		bad("approvals.max_held_bytes_per_sandbox: %d is less than approvals.max_body (%d): no request with a body that large could ever be held; want at least approvals.max_body", c.MaxHeldBytesPerSandbox, c.MaxBody)
	}
	if c.MaxHeldBytes > 0 && c.MaxHeldBytes < c.MaxHeldBytesPerSandbox {
		bad("approvals.max_held_bytes: %d is less than approvals.max_held_bytes_per_sandbox (%d); want at least that", c.MaxHeldBytes, c.MaxHeldBytesPerSandbox)
	}
	if c.Retention > 0 && c.RetryWindow > 0 && c.Retention < c.RetryWindow {
		return fmt.Errorf("approvals.retention: %s is shorter than approvals.retry_window (%s): approvals would be deleted before a retry could use them", c.Retention, c.RetryWindow)
	}
	if c.Store != "" {
		if _, _, err := parseStoreDSN(c.Store); err != nil {
			bad("approvals.store: %w", err)
		}
	}
	for _, key := range []string{"webhook", "service", "page_url"} {
		u := map[string]string{"webhook": c.Webhook, "service": c.Service, "page_url": c.PageURL}[key]
		if u == "" {
			continue
		}
		if err := checkHTTPURL(u); err != nil {
			bad("approvals.%s: %w", key, err)
		}
	}
	switch c.WebhookFormat {
	case "", "json", "slack":
	default:
		bad("approvals.webhook_format: %q is not a format; want json or slack", c.WebhookFormat)
	}
	seen := map[string]bool{}
	for i, a := range c.Approvers {
		key := fmt.Sprintf("approvals.approvers[%d]", i)
		switch {
		case a.Name == "":
			bad("%s.name: missing; want the approver's name", key)
		case strings.ContainsAny(a.Name, ":\n\r\t"):
			bad("%s.name: %q contains ':' or a control character; want a plain name", key, a.Name)
		case seen[a.Name]:
			bad("%s.name: %q is listed twice; want each approver once", key, a.Name)
		}
		if a.TokenFile == "" {
			bad("%s.token_file: missing; want the file holding the approver's token (at least 16 characters)", key)
		}
		seen[a.Name] = true
	}
	return errors.Join(errs...)
}

func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("not a URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("want an http or https URL, got %q", u.Redacted())
	}
	if u.Host == "" {
		return errors.New("URL has no host")
	}
	return nil
}

// Duration is a time.Duration written as "5m" or "90s" in YAML and JSON.
type Duration time.Duration

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML reads "5m"; a bare number is refused because its unit would be a guess.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	p, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil || n.Kind != yaml.ScalarNode {
		return typeError(n, "approval.Duration")
	}
	*d = Duration(p)
	return nil
}

// typeError is the error yaml.v3 itself gives for a value of the wrong type: it keeps
// decoding, so that every problem of the file is reported, and its text names the line,
// the value and the type (which the config loader turns into words).
func typeError(n *yaml.Node, typ string) error {
	tag := n.ShortTag()
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal %s into %s", n.Line, tag, typ)}}
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal %s `%s` into %s", n.Line, tag, n.Value, typ)}}
}

// MarshalYAML writes the duration as text.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// ByteSize is a number of bytes written as 1048576, "1MiB", "512KiB", "1M" or "2k".
type ByteSize int64

// UnmarshalYAML reads a byte count with an optional binary suffix.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseByteSize(n.Value)
	if err != nil || n.Kind != yaml.ScalarNode {
		return typeError(n, "approval.ByteSize")
	}
	*b = v
	return nil
}

// ParseByteSize reads "1MiB", "2KiB", "1M", "1024"; k, M and G mean powers of 1024.
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	num := strings.TrimRightFunc(t, func(r rune) bool { return r < '0' || r > '9' })
	unit := strings.ToLower(strings.TrimSpace(t[len(num):]))
	mult := int64(1)
	switch strings.TrimSuffix(strings.TrimSuffix(unit, "b"), "i") {
	case "":
	case "k":
		mult = 1 << 10
	case "m":
		mult = 1 << 20
	case "g":
		mult = 1 << 30
	default:
		return 0, fmt.Errorf("want a size such as \"1MiB\" or \"512KiB\", got %q", s)
	}
	v, err := strconv.ParseInt(num, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("want a size such as \"1MiB\" or \"512KiB\", got %q", s)
	}
	return ByteSize(v * mult), nil
}
