package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// runCheckArgs runs `airlock proxy --check ARGS...` with $AIRLOCK_HOME in a temporary
// directory and returns stdout, stderr and the error main would print.
func runCheckArgs(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	t.Setenv("AIRLOCK_HOME", filepath.Join(t.TempDir(), "home"))
	root := newRoot()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"proxy", "--check"}, args...))
	err := root.Execute()
	return out.String(), errOut.String(), err
}

// TestCheckReportsEveryStartupError: each config below starts no proxy, and --check says
// so, in the form FILE:LINE: dotted.key: what is wrong; what is expected (or --flag: ...
// for a value a flag set). Start-up (build) refuses each with the same words.
func TestCheckReportsEveryStartupError(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short.token")
	if err := os.WriteFile(short, []byte("five5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	policyFile := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(policyFile, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.jsonl") // neither an audit log nor a database
	if err := os.WriteFile(bad, []byte("garbage, not an audit line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	brokenHome := filepath.Join(dir, "broken")
	for name, mode := range map[string]os.FileMode{"ca.pem": 0o644, "ca-key.pem": 0o600} {
		if err := os.MkdirAll(filepath.Join(brokenHome, "ca"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(brokenHome, "ca", name), []byte("not PEM"), mode); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name, yaml string
		flags      []string
		env        map[string]string
		want       string // FILE stands for the config file
	}{
		{"misspelled key", "approvals: {timout: 5m}\n", nil, nil,
			"FILE:1: approvals.timout: unknown key; did you mean timeout?"},
		{"unknown key far from any", "approvals:\n  zzzzzzzzz: 1\n", nil, nil,
			"FILE:2: approvals.zzzzzzzzz: unknown key; want one of timeout, store,"},
		{"duration in words", "approvals:\n  timeout: 5 minutes\n", nil, nil,
			`FILE:2: approvals.timeout: "5 minutes" is not a duration; want a number with a unit, such as 250ms, 90s or 5m`},
		{"duration without unit", "limits:\n  upstream_header_timeout: 60\n", nil, nil,
			"FILE:2: limits.upstream_header_timeout: 60 has no unit; want a duration such as 60s or 60m"},
		{"long value", "policy_options:\n  timeout: two hundred and fifty ms\n", nil, nil,
			`FILE:2: policy_options.timeout: "two hundred and fifty ms" is not a duration`},
		{"bool", "require_auth: maybe\n", nil, nil,
			`FILE:1: require_auth: "maybe" is not a boolean; want true or false`},
		{"number", "limits: {max_header_bytes: lots}\n", nil, nil,
			`FILE:1: limits.max_header_bytes: "lots" is not a whole number`},
		{"list for a string", "home: [a, b]\n", nil, nil,
			"FILE:1: home: a list is not a single value"},
		{"audit fsync", "audit: {fsync: sometimes}\n", nil, nil,
			`FILE:1: audit.fsync: "sometimes" is not an fsync policy; want group, always, interval or never`},
		{"approver token missing", "approvals:\n  approvers:\n    - {name: oncall, token_file: " + filepath.Join(dir, "none") + "}\n", nil, nil,
			"FILE:3: approvals.approvers[0].token_file: open " + filepath.Join(dir, "none") + ": no such file or directory; want a readable file"},
		{"approver token short", "approvals:\n  approvers:\n    - {name: oncall, token_file: " + short + "}\n", nil, nil,
			"FILE:3: approvals.approvers[0].token_file: " + short + " holds a token of 5 characters; want at least 16"},
		{"listen in the file", "listen:\n  - 127.0.0.1:3128\n  - 127.0.0.1:99999\n", nil, nil,
			`FILE:3: listen[1]: "127.0.0.1:99999": port 99999 is out of range; want HOST:PORT with a port from 1 to 65535`},
		{"listen flag", "", []string{"--listen", "127.0.0.1:99999"}, nil,
			`--listen: "127.0.0.1:99999": port 99999 is out of range`},
		{"admin listen flag", "", []string{"--admin-listen", "nowhere"}, nil,
			`--admin-listen: "nowhere" is not an address; want HOST:PORT`},
		{"policy file", "", []string{"--policy", policyFile}, nil,
			"--policy: " + policyFile + " is a file, not a policy; want a directory holding .rego files, an OPA bundle (.tar.gz) or a bundle URL"},
		{"policy dir without rego", "policy: " + dir + "\n", nil, nil,
			"FILE:1: policy: load policy " + dir + ": no .rego files; want a directory holding .rego files, an OPA bundle (.tar.gz) or a bundle URL"},
		{"memory", "sandbox: {memory: 1}\n", nil, nil,
			`FILE:1: sandbox.memory: "1" is 1 bytes, below the minimum of 16M`},
		{"audit log under a file", "audit_log: " + short + "/audit.jsonl\n", nil, nil,
			"FILE:1: audit_log: " + short + " is not a directory; want a file airlock can create or append to (or - for no audit log)"},
		{"audit log flag", "", []string{"--audit-log", short + "/audit.jsonl"}, nil,
			"--audit-log: " + short + " is not a directory; want a file airlock can create or append to"},
		{"audit log a directory", "audit_log: " + dir + "\n", nil, nil,
			"FILE:1: audit_log: " + dir + " is a directory; want a file"},
		{"audit log not a log", "audit_log: " + bad + "\n", nil, nil,
			"FILE:1: audit_log: audit log " + bad + ": last line is not an audit line (no seq); verify it and move it aside"},
		{"decision log without its directory", "audit:\n  decision_log: " + dir + "/none/decisions.jsonl\n", nil, nil,
			"FILE:2: audit.decision_log: directory " + dir + "/none does not exist; want a file airlock can create or append to, in an existing directory"},
		{"sqlite store under a file", "approvals: {store: 'sqlite:" + short + "/approvals.db'}\n", nil, nil,
			"FILE:1: approvals.store: " + short + " is not a directory; want sqlite:PATH of a database airlock can create or open for writing"},
		{"sqlite store not a database", "approvals: {store: 'sqlite:" + bad + "'}\n", nil, nil,
			"FILE:1: approvals.store: " + bad + " is not an SQLite database"},
		{"postgres address", "approvals: {store: 'postgres://%zz'}\n", nil, nil,
			"FILE:1: approvals.store: postgres://%zz is not a valid PostgreSQL address; want a URL such as postgres://HOST:5432/airlock"},
		{"postgres options", "approvals: {store: 'postgres://db:5432/airlock?sslmode=sometimes'}\n", nil, nil,
			"FILE:1: approvals.store: postgres://db:5432/airlock?sslmode=sometimes is not a valid PostgreSQL address; want a URL such as postgres://HOST:5432/airlock with valid options"},
		{"postgres CA file missing", "approvals: {store: 'postgres://db:5432/airlock?sslmode=verify-full&sslrootcert=" + dir + "/none.crt'}\n", nil, nil,
			"FILE:1: approvals.store: postgres://db:5432/airlock?sslmode=verify-full&sslrootcert=" + dir + "/none.crt: open " + dir + "/none.crt: no such file or directory; want the files its options name readable"},
		{"home under a file", "home: " + short + "/home\n", nil, nil,
			"FILE:1: home: " + short + " is not a directory; want a directory airlock can keep its state in"},
		{"broken CA", "home: " + brokenHome + "\n", nil, nil,
			"FILE:1: home: CA in " + filepath.Join(brokenHome, "ca") + ": "},
		{"signing key missing", "audit: {signing_key_file: " + dir + "/none.key}\n", nil, nil,
			"FILE:1: audit.signing_key_file: "},
		{"upstream CA not PEM", "upstream_ca: " + short + "\n", nil, nil,
			"FILE:1: upstream_ca: " + short + ": no PEM certificates found; want a PEM file of CA certificates"},
		{"token key short", "proxy: {token_key_file: " + short + "}\n", nil, nil,
			"FILE:1: proxy.token_key_file: " + short + " line 1: a key of 5 bytes; want at least"},
		{"vault CA not PEM", "vault:\n  address: https://vault.test:8200\n  ca_cert: " + short + "\ncredentials:\n  api: {vault: {path: secret/data/api}, inject: {header: Authorization, value: 'Bearer {{ .value }}'}}\n", nil, nil,
			"FILE:3: vault.ca_cert: " + short + ": no PEM certificates found; want a PEM file of CA certificates"},
		{"trace exporter from the environment", "", nil, map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"},
			`telemetry: OTEL_TRACES_EXPORTER="zipkin": airlock supports otlp or none`},
		{"OTLP protocol from the environment", "", nil, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
			`telemetry: OTLP protocol "http/json": want http/protobuf or grpc`},
		{"parent proxy from the environment", "", nil, map[string]string{"HTTPS_PROXY": "http://[::1"},
			`HTTPS_PROXY: "http://[::1" is not a URL`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.flags
			cfgPath := ""
			if tt.yaml != "" {
				cfgPath = writeConfig(t, tt.yaml)
				args = append([]string{"--config", cfgPath}, args...)
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			want := strings.ReplaceAll(tt.want, "FILE", cfgPath)
			before := tree(t, dir)
			out, _, err := runCheckArgs(t, args...)
			if err == nil {
				t.Fatalf("--check passed (%q), want %s", out, want)
			}
			lines := errorLines(err)
			if len(lines) != 1 || !strings.HasPrefix(lines[0], want) {
				t.Fatalf("--check: %q\nwant one line starting %q", lines, want)
			}
			// Start-up refuses it with the same words.
			cfg, _, err := loadWithFlags(t, args...)
			if err == nil {
				var s *stack
				s, err = build(context.Background(), cfg, slog.New(slog.DiscardHandler))
				if err == nil {
					s.close(context.Background())
					t.Fatalf("build succeeded where --check failed")
				}
			}
			if got := errorLines(err); len(got) != 1 || got[0] != lines[0] {
				t.Errorf("start-up: %q\n--check: %q", got, lines)
			}
			// Neither wrote anything: --check creates no file, and start-up refuses
			// before it writes.
			if after := tree(t, dir); !slices.Equal(before, after) {
				t.Errorf("files changed:\nbefore %q\nafter  %q", before, after)
			}
			if _, err := os.Stat(os.Getenv("AIRLOCK_HOME")); !os.IsNotExist(err) {
				t.Errorf("$AIRLOCK_HOME was created (%v)", err)
			}
		})
	}
}

// TestCheckReportsAllProblemsAtOnce: a config with several problems gets them all, in the
// order of the file, from the file's decoding, from validation and from the start-up
// checks (files, directories, the policy) alike; a key already found wrong is reported once.
func TestCheckReportsAllProblemsAtOnce(t *testing.T) {
	dir := t.TempDir()
	shared := filepath.Join(dir, "shared.key") // a secret file others may read
	if err := os.WriteFile(shared, []byte(strings.Repeat("k", 40)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := writeConfig(t, "approvals:\n  timout: 5m\n  timeout: 5 minutes\n  store: 'sqlite:/etc/passwd/approvals.db'\nlimits:\n  upstream_header_timeout: 60\nrequire_auth: maybe\n"+
		"audit: {fsync: sometimes}\nlog: {level: loud}\naudit_log: /etc/passwd/audit.jsonl\nupstream_ca: "+dir+"/none.pem\npolicy: "+dir+"\nproxy:\n  token_key_file: "+shared+"\n")
	_, _, err := runCheckArgs(t, "--config", p, "--listen", "127.0.0.1:99999")
	got := errorLines(err)
	want := []string{"--listen: ", p + ":2: approvals.timout: ", p + ":3: approvals.timeout: ", p + ":4: approvals.store: /etc/passwd is not a directory",
		p + ":6: limits.upstream_header_timeout: ", p + ":7: require_auth: ", p + ":8: audit.fsync: ", p + ":9: log.level: ",
		p + ":10: audit_log: /etc/passwd is not a directory", p + ":11: upstream_ca: open " + dir + "/none.pem", p + ":12: policy: load policy " + dir + ": no .rego files",
		p + ":14: proxy.token_key_file: " + shared + " may be read by group or others"}
	if len(got) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d: %q, want it to start %q", i, got[i], want[i])
		}
	}
}

// TestCheckOKIsOneLine: a good config gets one human line on stdout and nothing else: no
// log lines, and nothing written to $AIRLOCK_HOME.
func TestCheckOKIsOneLine(t *testing.T) {
	// The sessions' state directory is named so that the default (/run/airlock/sessions),
	// which a user other than root may not create, gives no warning.
	// A debug log in JSON is the proxy's, not --check's.
	p := writeConfig(t, "log: {level: debug, format: json}\nsessions: {state_dir: "+filepath.Join(t.TempDir(), "sessions")+"}\n")
	out, errOut, err := runCheckArgs(t, "--config", p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "config OK; policy shipped policy revision sha256:") || strings.Count(out, "\n") != 1 || errOut != "" {
		t.Errorf("stdout %q, stderr %q; want one line \"config OK; ...\" and nothing else", out, errOut)
	}
	if _, err := os.Stat(os.Getenv("AIRLOCK_HOME")); !os.IsNotExist(err) {
		t.Errorf("--check wrote $AIRLOCK_HOME (%v)", err)
	}
}

// TestCheckWarnsOfSessions: a state directory for the sessions that cannot be made does
// not stop the proxy (it serves no sessions, and says so), so --check passes with a warning
// that names the key, and creates nothing.
func TestCheckWarnsOfSessions(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p := writeConfig(t, "log: {level: warn}\nsessions:\n  state_dir: "+file+"/sessions\n")
	out, errOut, err := runCheckArgs(t, "--config", p)
	if err != nil {
		t.Fatal(err)
	}
	want := "warning: " + p + ":3: sessions.state_dir: " + file + " is not a directory; want a directory airlock can create its sessions' records in"
	if !strings.HasPrefix(errOut, want) || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(out, "config OK; ") {
		t.Errorf("stdout %q\nstderr %q\nwant config OK and one warning starting %q", out, errOut, want)
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"timeout", "store", "webhook", "approvers", "max_body"}
	for in, want := range map[string]string{"timout": "timeout", "tiemout": "timeout", "approver": "approvers", "stor": "store", "max-body": "max_body", "colour": "", "x": ""} {
		if got := suggest(in, known); got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

// tree lists the files under dir, with their sizes.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("%s %d", p, fi.Size()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
