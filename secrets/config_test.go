package secrets

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

const exampleYAML = `
vault:
  address: https://vault.internal:8200
  timeout: 15s
  auth: {method: approle, role_id: airlock, secret_id_file: /run/airlock/secret-id}
credentials:
  github-read:
    vault: {path: github/token, method: POST, params: {permissions: {contents: read}}}
    inject: {header: Authorization, value: "Bearer {{ .data.token }}"}
    max_ttl: 10m
  openai:
    vault: {path: secret/data/openai}
    inject: {header: Authorization, value: "Bearer {{ .data.data.key }}"}
  maps:
    env: MAPS_KEY
    inject: {query: key, value: "{{ .value }}"}
  registry:
    file: /etc/airlock/registry-password
    inject: {basic: {username: robot, password: "{{ .value }}"}}
`

func TestConfigYAML(t *testing.T) {
	var cfg struct {
		Vault       VaultConfig                 `yaml:"vault"`
		Credentials map[string]CredentialConfig `yaml:"credentials"`
	}
	if err := yaml.Unmarshal([]byte(exampleYAML), &cfg); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	if err := cfg.Vault.Validate(); err != nil {
		t.Fatalf("vault: %v", err)
	}
	if err := ValidateCredentials(cfg.Credentials); err != nil {
		t.Fatalf("credentials: %v", err)
	}
	gh := cfg.Credentials["github-read"]
	if got, want := gh.MaxTTL.Std(), 10*time.Minute; got != want {
		t.Errorf("max_ttl: got %v, want %v", got, want)
	}
	if got, want := gh.Vault.method(), "POST"; got != want {
		t.Errorf("method: got %q, want %q", got, want)
	}
	if got, want := cfg.Credentials["openai"].Vault.method(), "GET"; got != want {
		t.Errorf("default method: got %q, want %q", got, want)
	}
	if got, want := cfg.Vault.Timeout.Std(), 15*time.Second; got != want {
		t.Errorf("timeout: got %v, want %v", got, want)
	}
	if cfg.Credentials["registry"].Inject.Basic == nil {
		t.Errorf("basic: got nil")
	}
}

func TestDurationYAML(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr string
	}{
		{"d: 10m", 10 * time.Minute, ""},
		{"d: 90s", 90 * time.Second, ""},
		// A yaml.TypeError, so that decoding goes on and every problem is reported; the
		// config loader words it (cmd/airlock).
		{"d: 600", 0, "line 1: cannot unmarshal !!int `600` into secrets.Duration"},
		{"d: -1m", 0, "line 1: cannot unmarshal !!str `-1m` into secrets.Duration"},
		{"d: soon", 0, "line 1: cannot unmarshal !!str `soon` into secrets.Duration"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var v struct{ D Duration }
			err := yaml.Unmarshal([]byte(tt.in), &v)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || v.D.Std() != tt.want {
				t.Fatalf("got %v, %v; want %v", v.D.Std(), err, tt.want)
			}
		})
	}
}

func TestValidateCredentials(t *testing.T) {
	hdr := Inject{Header: "Authorization", Value: "Bearer {{ .value }}"}
	tests := []struct {
		name string
		c    CredentialConfig
		want string // error prefix; "" = valid
	}{
		{"ok-env", CredentialConfig{Env: "TOKEN", Inject: hdr}, ""},
		{"ok-vault", CredentialConfig{Vault: &VaultSource{Path: "secret/data/x"}, Inject: hdr}, ""},
		{"no-source", CredentialConfig{Inject: hdr}, "credentials.no-source: exactly one source"},
		{"two-sources", CredentialConfig{Env: "A", File: "/f", Inject: hdr}, "credentials.two-sources: exactly one source"},
		{"bad-template", CredentialConfig{Env: "A", Inject: Inject{Header: "X-Key", Value: "{{ .value "}}, "credentials.bad-template.inject.value: template:"},
		{"empty-value", CredentialConfig{Env: "A", Inject: Inject{Header: "X-Key"}}, "credentials.empty-value.inject.value: required"},
		{"no-inject", CredentialConfig{Env: "A"}, "credentials.no-inject.inject: exactly one of header, query, basic"},
		{"two-injects", CredentialConfig{Env: "A", Inject: Inject{Header: "X", Query: "k", Value: "{{.value}}"}}, "credentials.two-injects.inject: exactly one"},
		{"hop-header", CredentialConfig{Env: "A", Inject: Inject{Header: "proxy-authorization", Value: "{{.value}}"}}, "credentials.hop-header.inject.header:"},
		{"bad-header", CredentialConfig{Env: "A", Inject: Inject{Header: "X Key", Value: "{{.value}}"}}, "credentials.bad-header.inject.header:"},
		{"bad-query", CredentialConfig{Env: "A", Inject: Inject{Query: "a&b", Value: "{{.value}}"}}, "credentials.bad-query.inject.query:"},
		{"basic-value", CredentialConfig{Env: "A", Inject: Inject{Value: "x", Basic: &BasicInject{Username: "u", Password: "{{.value}}"}}}, "credentials.basic-value.inject.value:"},
		{"basic-nopass", CredentialConfig{Env: "A", Inject: Inject{Basic: &BasicInject{Username: "u"}}}, "credentials.basic-nopass.inject.basic.password: required"},
		{"bad-env", CredentialConfig{Env: "A-B", Inject: hdr}, "credentials.bad-env.env:"},
		{"no-path", CredentialConfig{Vault: &VaultSource{}, Inject: hdr}, "credentials.no-path.vault.path: required"},
		{"v1-path", CredentialConfig{Vault: &VaultSource{Path: "/v1/secret/x"}, Inject: hdr}, "credentials.v1-path.vault.path:"},
		{"bad-method", CredentialConfig{Vault: &VaultSource{Path: "x", Method: "DELETE"}, Inject: hdr}, "credentials.bad-method.vault.method:"},
		{"get-map-param", CredentialConfig{Vault: &VaultSource{Path: "x", Params: map[string]any{"p": map[string]any{"a": 1}}}, Inject: hdr}, "credentials.get-map-param.vault.params.p:"},
		{"bad name!", CredentialConfig{Env: "A", Inject: hdr}, "credentials.bad name!: name must be"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateCredentials(map[string]CredentialConfig{tt.name: tt.c})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
				t.Fatalf("got %v, want prefix %q", err, tt.want)
			}
		})
	}
}

func TestValidateVault(t *testing.T) {
	tests := []struct {
		name string
		v    VaultConfig
		want string
	}{
		{"token-default", VaultConfig{}, ""},
		{"approle", VaultConfig{Auth: VaultAuth{Method: "approle", RoleID: "r", SecretIDFile: "/s"}}, ""},
		{"approle-no-role", VaultConfig{Auth: VaultAuth{Method: "approle", SecretIDFile: "/s"}}, "vault.auth.role_id: required"},
		{"approle-no-secret", VaultConfig{Auth: VaultAuth{Method: "approle", RoleID: "r"}}, "vault.auth.secret_id_file: required"},
		{"k8s-no-role", VaultConfig{Auth: VaultAuth{Method: "kubernetes"}}, "vault.auth.role: required"},
		{"bad-method", VaultConfig{Auth: VaultAuth{Method: "ldap"}}, "vault.auth.method:"},
		{"bad-address", VaultConfig{Address: "vault:8200"}, "vault.address:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.v.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tt.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.want)):
				t.Fatalf("got %v, want prefix %q", err, tt.want)
			}
		})
	}
}
