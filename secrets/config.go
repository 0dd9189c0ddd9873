package secrets

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration that reads and writes as "10m", "90s" in YAML and JSON.
type Duration time.Duration

// UnmarshalText implements encoding.TextUnmarshaler (used by yaml.v3 and encoding/json).
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("duration %q: want a number with a unit, e.g. 90s or 10m", string(b))
	}
	if v < 0 {
		return fmt.Errorf("duration %q: must not be negative", string(b))
	}
	*d = Duration(v)
	return nil
}

// UnmarshalYAML reads "10m" like UnmarshalText; a value that is no duration is a
// yaml.TypeError naming its line, value and type, so that decoding goes on and the config
// loader reports it with the file's other problems.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && d.UnmarshalText([]byte(n.Value)) == nil {
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal %s into secrets.Duration", n.Line, n.ShortTag())}}
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal %s `%s` into secrets.Duration", n.Line, n.ShortTag(), n.Value)}}
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// VaultConfig says how the proxy reaches and authenticates to Vault. Empty fields follow
// vault/api's environment conventions: VAULT_ADDR, VAULT_TOKEN, VAULT_CACERT, VAULT_NAMESPACE.
type VaultConfig struct {
	Address   string `yaml:"address" json:"address,omitempty"`
	Namespace string `yaml:"namespace" json:"namespace,omitempty"`
	// CACert is a PEM file of CAs that verify Vault's TLS certificate.
	CACert string `yaml:"ca_cert" json:"ca_cert,omitempty"`
	// Timeout bounds each Vault call; zero means 10s.
	Timeout Duration  `yaml:"timeout" json:"timeout,omitempty"`
	Auth    VaultAuth `yaml:"auth" json:"auth"`
}

// VaultAuth is how the proxy itself logs in to Vault.
type VaultAuth struct {
	// Method is "token" (default), "approle" or "kubernetes".
	Method string `yaml:"method" json:"method,omitempty"`
	// TokenFile (token method) holds the proxy's token; empty means VAULT_TOKEN. Either is
	// read again when Vault reports the token invalid, so a rotated token is picked up.
	TokenFile string `yaml:"token_file" json:"token_file,omitempty"`
	// RoleID and SecretIDFile (approle method).
	RoleID       string `yaml:"role_id" json:"role_id,omitempty"`
	SecretIDFile string `yaml:"secret_id_file" json:"secret_id_file,omitempty"`
	// Role and JWTPath (kubernetes method); JWTPath defaults to the pod's service account token.
	Role    string `yaml:"role" json:"role,omitempty"`
	JWTPath string `yaml:"jwt_path" json:"jwt_path,omitempty"`
	// MountPath of the auth method; empty means the method's default ("approle", "kubernetes").
	MountPath string `yaml:"mount_path" json:"mount_path,omitempty"`
}

// Auth methods.
const (
	AuthToken      = "token"
	AuthAppRole    = "approle"
	AuthKubernetes = "kubernetes"
)

// CredentialConfig is one named credential: exactly one source (Vault, env or file) and one
// injection.
type CredentialConfig struct {
	Vault *VaultSource `yaml:"vault" json:"vault,omitempty"`
	// Env names a variable of the proxy's own environment.
	Env string `yaml:"env" json:"env,omitempty"`
	// File is a path on the proxy's host (outside any sandbox); surrounding whitespace is trimmed.
	File   string `yaml:"file" json:"file,omitempty"`
	Inject Inject `yaml:"inject" json:"inject"`
	// MaxTTL caps how long a fetched credential is cached (and used) before it is fetched
	// again, whatever its lease says. Zero means the lease decides.
	MaxTTL Duration `yaml:"max_ttl" json:"max_ttl,omitempty"`
}

// VaultSource is a Vault call whose response feeds the injection template.
type VaultSource struct {
	// Path without the /v1/ prefix, e.g. "secret/data/openai" or "auth/token/create".
	Path string `yaml:"path" json:"path"`
	// Method is GET (default; params become query parameters), POST or PUT (params are the
	// JSON body).
	Method string         `yaml:"method" json:"method,omitempty"`
	Params map[string]any `yaml:"params" json:"params,omitempty"`
}

// Inject says where the credential goes on the outbound request: a header, a query
// parameter, or basic auth. Value, Username and Password are Go text/template templates over
// the Vault response (.data, .lease_id, .lease_duration, .renewable, .auth) or, for env and
// file sources, over {.value}.
type Inject struct {
	Header string       `yaml:"header" json:"header,omitempty"`
	Query  string       `yaml:"query" json:"query,omitempty"`
	Value  string       `yaml:"value" json:"value,omitempty"`
	Basic  *BasicInject `yaml:"basic" json:"basic,omitempty"`
}

// BasicInject sets HTTP basic auth from two templates.
type BasicInject struct {
	Username string `yaml:"username" json:"username"`
	Password string `yaml:"password" json:"password"`
}

var (
	credentialName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	headerToken    = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
	envName        = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// headers a credential may not be injected into: they are hop-by-hop or framing.
var forbiddenHeaders = []string{
	"Connection", "Content-Length", "Host", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// Validate checks the Vault settings; errors name the key under "vault.".
func (v VaultConfig) Validate() error {
	switch v.Auth.Method {
	case "", AuthToken:
		if v.Auth.RoleID != "" || v.Auth.SecretIDFile != "" || v.Auth.Role != "" {
			return errors.New("vault.auth: role_id, secret_id_file and role need method approle or kubernetes")
		}
	case AuthAppRole:
		if v.Auth.RoleID == "" {
			return errors.New("vault.auth.role_id: required for method approle")
		}
		if v.Auth.SecretIDFile == "" {
			return errors.New("vault.auth.secret_id_file: required for method approle")
		}
	case AuthKubernetes:
		if v.Auth.Role == "" {
			return errors.New("vault.auth.role: required for method kubernetes")
		}
	default:
		return fmt.Errorf("vault.auth.method: %q is not one of token, approle, kubernetes", v.Auth.Method)
	}
	if v.Address != "" && !strings.HasPrefix(v.Address, "http://") && !strings.HasPrefix(v.Address, "https://") {
		return fmt.Errorf("vault.address: %q must start with http:// or https://", v.Address)
	}
	return nil
}

// ValidateCredentials checks every credential; errors name the key, e.g.
// "credentials.github-read.inject.value: template: ...".
func ValidateCredentials(creds map[string]CredentialConfig) error {
	names := make([]string, 0, len(creds))
	for n := range creds {
		names = append(names, n)
	}
	slices.Sort(names)
	var errs []error
	for _, n := range names {
		if !credentialName.MatchString(n) {
			errs = append(errs, fmt.Errorf("credentials.%s: name must be 1-64 letters, digits, '.', '_' or '-'", n))
			continue
		}
		if err := creds[n].Validate(); err != nil {
			var ke *keyError
			if errors.As(err, &ke) && ke.key != "" {
				errs = append(errs, fmt.Errorf("credentials.%s.%w", n, err))
			} else {
				errs = append(errs, fmt.Errorf("credentials.%s: %w", n, err))
			}
		}
	}
	return errors.Join(errs...)
}

// keyError names the config key at fault, relative to the credential.
type keyError struct {
	key string
	msg string
}

func (e *keyError) Error() string {
	if e.key == "" {
		return e.msg
	}
	return e.key + ": " + e.msg
}

func keyErr(key, format string, args ...any) error {
	return &keyError{key: key, msg: fmt.Sprintf(format, args...)}
}

// Validate checks one credential; errors start with the key relative to the credential
// ("inject.value: ..."), which ValidateCredentials prefixes with "credentials.NAME.".
func (c CredentialConfig) Validate() error {
	sources := 0
	if c.Vault != nil {
		sources++
	}
	if c.Env != "" {
		sources++
	}
	if c.File != "" {
		sources++
	}
	if sources != 1 {
		return keyErr("", "exactly one source (vault, env or file) is required, got %d", sources)
	}
	if c.Vault != nil {
		if err := c.Vault.validate(); err != nil {
			return err
		}
	}
	if c.Env != "" && !envName.MatchString(c.Env) {
		return keyErr("env", "%q is not an environment variable name", c.Env)
	}
	_, err := c.Inject.compile("check")
	return err
}

func (s *VaultSource) validate() error {
	p := strings.Trim(s.Path, "/")
	if p == "" {
		return keyErr("vault.path", "required")
	}
	if strings.HasPrefix(p, "v1/") {
		return keyErr("vault.path", "%q: leave out the /v1/ prefix", s.Path)
	}
	if strings.Contains(p, "..") || strings.ContainsAny(p, "?#") {
		return keyErr("vault.path", "%q: must be a plain Vault path", s.Path)
	}
	switch strings.ToUpper(s.Method) {
	case "", http.MethodGet:
		for k, v := range s.Params {
			if _, ok := queryValues(v); !ok {
				return keyErr("vault.params."+k, "a GET takes only strings, numbers, booleans or lists of them")
			}
		}
	case http.MethodPost, http.MethodPut:
	default:
		return keyErr("vault.method", "%q is not one of GET, POST, PUT", s.Method)
	}
	return nil
}

// method returns the normalised HTTP method.
func (s *VaultSource) method() string {
	if s.Method == "" {
		return http.MethodGet
	}
	return strings.ToUpper(s.Method)
}

// queryValues turns a GET parameter into query values.
func queryValues(v any) ([]string, bool) {
	switch x := v.(type) {
	case string:
		return []string{x}, true
	case bool, int, int64, uint64, float64:
		return []string{fmt.Sprint(x)}, true
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			s, ok := queryValues(e)
			if !ok || len(s) != 1 {
				return nil, false
			}
			out = append(out, s[0])
		}
		return out, true
	case []string:
		return x, true
	}
	return nil, false
}
