package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "airlock.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigErrorsNameKeyAndLine(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"unknown key", "listen: [127.0.0.1:3128]\nlisten_addr: x\n", ":2: "},
		{"bad cidr", "home: /tmp/x\nallow_private:\n  - 10.0.0.0/8\n  - not-a-cidr\n", "allow_private"},
		{"bad duration", "policy_options:\n  timeout: soon\n", ":2: "},
		{"bad approvals timeout", "approvals:\n  store: \"mysql://x\"\n", "approvals.store"},
		{"bad log level", "log:\n  level: loud\n", "log.level"},
		{"protected path outside the workspace", "sandbox:\n  protected_paths: [.vscode, ../x]\n", "sandbox.protected_paths"},
		{"absolute protected path", "sandbox:\n  protected_paths: [/etc/passwd]\n", "sandbox.protected_paths"},
		{"relative mask path", "sandbox:\n  mask_paths: [/srv/x, etc/ssh]\n", "sandbox.mask_paths[1]"},
		{"relative unmask path", "sandbox:\n  unmask_paths: [ssh]\n", "sandbox.unmask_paths[0]"},
		{"relative cgroup parent", "sandbox:\n  cgroup_parent: airlock-me\n", "sandbox.cgroup_parent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeConfig(t, tt.body)
			_, _, err := loadWithFlags(t, "--config", p)
			if err == nil {
				t.Fatalf("config %q loaded, want an error", tt.body)
			}
			if !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not name the file and %q", err, tt.want)
			}
		})
	}
}

func TestValidateErrorCarriesTheKeyLine(t *testing.T) {
	p := writeConfig(t, "home: /tmp/x\nlog:\n  format: json\n  level: loud\n")
	_, _, err := loadWithFlags(t, "--config", p)
	if err == nil || !strings.Contains(err.Error(), p+":4: log.level") {
		t.Fatalf("err = %v, want %s:4: log.level ...", err, p)
	}
}

func TestFlagsOverrideConfig(t *testing.T) {
	p := writeConfig(t, "home: /tmp/x\nlisten: [127.0.0.1:1111]\nrequire_auth: false\npolicy_options:\n  timeout: 150ms\n")
	cfg, _, err := loadWithFlags(t, "--config", p, "--listen", "127.0.0.1:2222", "--require-auth")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Listen) != 1 || cfg.Listen[0] != "127.0.0.1:2222" || !cfg.RequireAuth {
		t.Errorf("listen=%v require_auth=%v, want the flags' values", cfg.Listen, cfg.RequireAuth)
	}
	if cfg.PolicyConfig.Timeout.String() != "150ms" {
		t.Errorf("policy_options.timeout = %v, want 150ms from the file (typed duration)", cfg.PolicyConfig.Timeout)
	}
}

func loadWithFlags(t *testing.T, args ...string) (*Config, *keyLines, error) {
	t.Helper()
	f := &proxyFlags{}
	cmd := &cobra.Command{}
	f.bindProxy(cmd)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	return f.load(cmd)
}

// TestKubernetesManifestConfigLoads: the airlock.yaml in deploy/kubernetes uses only keys
// the config knows, with valid values (the manifests' own test checks the mounts).
func TestKubernetesManifestConfigLoads(t *testing.T) {
	b, err := os.ReadFile("../../deploy/kubernetes/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc struct {
			Metadata struct{ Name string }
			Data     map[string]string
		}
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("no airlock-config ConfigMap with airlock.yaml: %v", err)
		}
		if doc.Metadata.Name != "airlock-config" {
			continue
		}
		cfg, _, err := loadWithFlags(t, "--config", writeConfig(t, doc.Data["airlock.yaml"]))
		if err != nil {
			t.Fatalf("deploy/kubernetes airlock.yaml: %v", err)
		}
		if cfg.Proxy.TokenKeyFile == "" || len(cfg.Proxy.Issuers) == 0 {
			t.Errorf("deploy/kubernetes airlock.yaml: proxy.token_key_file %q, %d issuers; want both for several replicas", cfg.Proxy.TokenKeyFile, len(cfg.Proxy.Issuers))
		}
		return
	}
}

// TestComposeConfigLoads: deploy/airlock.yaml (docker-compose.yml's config) loads, and the
// admin API answers to the compose service's name.
func TestComposeConfigLoads(t *testing.T) {
	cfg, _, err := loadWithFlags(t, "--config", "../../deploy/airlock.yaml")
	if err != nil {
		t.Fatalf("deploy/airlock.yaml: %v", err)
	}
	if !slices.Contains(cfg.Admin.Hosts, "airlock") {
		t.Errorf("deploy/airlock.yaml admin.hosts %v: want the compose service name airlock", cfg.Admin.Hosts)
	}
}

// TestSecretFilesMustBePrivate: the config refuses a secret file that group or others may
// read (ssh's rule for private keys: a file of airlock's own user readable by group or
// others, or one anybody may read whoever owns it), naming the key and its line; a file
// only its owner reads (or, owned by another user, its group: a secret volume mounted
// with fsGroup) is taken. The config file, the secret files and $AIRLOCK_HOME are what a
// sandbox must not read.
func TestSecretFilesMustBePrivate(t *testing.T) {
	dir := t.TempDir()
	file := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("s3cr3t-0123456789-0123456789-0123456789\n"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for i, tt := range []struct {
		key, yaml string
	}{
		{"approvals.approvers[0].token_file", "approvals:\n  approvers: [{name: oncall, token_file: %s}]\n"},
		{"proxy.token_key_file", "proxy:\n  token_key_file: %s\n"},
		{"proxy.issuers[0].token_file", "proxy:\n  issuers: [{name: orch, token_file: %s}]\n"},
		{"audit.signing_key_file", "audit:\n  signing_key_file: %s\n"},
		{"vault.auth.secret_id_file", "vault:\n  auth: {method: approle, role_id: r, secret_id_file: %s}\n"},
		{"credentials.registry.file", "credentials:\n  registry:\n    file: %s\n    inject: {header: X-Token, value: \"{{ .value }}\"}\n"},
	} {
		for _, c := range []struct {
			mode  os.FileMode
			other bool // owned by another user
			ok    bool
		}{{0o644, false, false}, {0o640, false, false}, {0o604, false, false}, {0o600, false, true}, {0o400, false, true},
			{0o644, true, false}, {0o440, true, true}} {
			name := fmt.Sprintf("%s-%o-%v", tt.key, c.mode, c.other)
			p := file(fmt.Sprintf("secret-%d-%o-%v", i, c.mode, c.other), c.mode)
			if c.other {
				if os.Geteuid() != 0 {
					continue
				}
				if err := os.Chown(p, 65534, 65534); err != nil {
					t.Fatal(err)
				}
			}
			cfgPath := writeConfig(t, "home: "+dir+"/home\n"+fmt.Sprintf(tt.yaml, p))
			cfg, _, err := loadWithFlags(t, "--config", cfgPath)
			if c.ok != (err == nil) {
				t.Errorf("%s: %v, want accepted %v", name, err, c.ok)
				continue
			}
			if err != nil && (!strings.Contains(err.Error(), tt.key) || !strings.Contains(err.Error(), cfgPath+":")) {
				t.Errorf("%s: error %q does not name the key and its line", name, err)
			}
			if err == nil {
				hidden := cfg.hiddenPaths(cfgPath)
				for _, want := range []string{cfgPath, p, dir + "/home"} {
					if !slices.Contains(hidden, want) {
						t.Errorf("%s: hidden paths %v lack %s", name, hidden, want)
					}
				}
			}
		}
	}
}

// TestHiddenPathsCoverSessionsStateDir: a sessions.state_dir where a sandbox could see it
// (under /opt, a read-only path, the workspace) holds every session's record, env values
// included, and the argv of its execs; a rootless sandbox is their owner. It is hidden
// like $AIRLOCK_HOME.
func TestHiddenPathsCoverSessionsStateDir(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "sessions")
	cfgPath := writeConfig(t, "home: "+dir+"/home\nsessions:\n  state_dir: "+state+"\n")
	cfg, _, err := loadWithFlags(t, "--config", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if hidden := cfg.hiddenPaths(cfgPath); !slices.Contains(hidden, state) {
		t.Errorf("hidden paths %v lack sessions.state_dir %s", hidden, state)
	}
}

// TestHiddenPathsCoverRootlessState: an ordinary user's airlock keeps its sessions' records
// and its sandboxes' state under $XDG_RUNTIME_DIR/airlock (else ~/.local/state/airlock/run)
// when sessions.state_dir is unset; a sandbox whose workspace is that user's home, whose
// processes are that user, would read and write them (seen: the state directory listed and
// writable from /workspace). They are hidden like sessions.state_dir.
func TestHiddenPathsCoverRootlessState(t *testing.T) {
	dir := t.TempDir()
	for _, xdg := range []string{filepath.Join(dir, "xdg"), ""} {
		t.Setenv("XDG_RUNTIME_DIR", xdg)
		t.Setenv("HOME", filepath.Join(dir, "home"))
		cfgPath := writeConfig(t, "home: "+dir+"/home/.airlock\n")
		cfg, _, err := loadWithFlags(t, "--config", cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		want := filepath.Join(dir, "home", ".local", "state", "airlock", "run")
		if xdg != "" {
			want = filepath.Join(xdg, "airlock")
		}
		if hidden := cfg.hiddenPaths(cfgPath); !slices.Contains(hidden, want) {
			t.Errorf("XDG_RUNTIME_DIR=%q: hidden paths %v lack the rootless state directory %s", xdg, hidden, want)
		}
	}
}
