package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
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
	tests := []struct {
		name, yaml string
		flags      []string
		want       string // FILE stands for the config file
	}{
		{"misspelled key", "approvals: {timout: 5m}\n", nil,
			"FILE:1: approvals.timout: unknown key; did you mean timeout?"},
		{"unknown key far from any", "approvals:\n  zzzzzzzzz: 1\n", nil,
			"FILE:2: approvals.zzzzzzzzz: unknown key; want one of timeout, store,"},
		{"duration in words", "approvals:\n  timeout: 5 minutes\n", nil,
			`FILE:2: approvals.timeout: "5 minutes" is not a duration; want a number with a unit, such as 250ms, 90s or 5m`},
		{"duration without unit", "limits:\n  upstream_header_timeout: 60\n", nil,
			"FILE:2: limits.upstream_header_timeout: 60 has no unit; want a duration such as 60s or 60m"},
		{"long value", "policy_options:\n  timeout: two hundred and fifty ms\n", nil,
			`FILE:2: policy_options.timeout: "two hundred and fifty ms" is not a duration`},
		{"bool", "require_auth: maybe\n", nil,
			`FILE:1: require_auth: "maybe" is not a boolean; want true or false`},
		{"number", "limits: {max_header_bytes: lots}\n", nil,
			`FILE:1: limits.max_header_bytes: "lots" is not a whole number`},
		{"list for a string", "home: [a, b]\n", nil,
			"FILE:1: home: a list is not a single value"},
		{"audit fsync", "audit: {fsync: sometimes}\n", nil,
			`FILE:1: audit.fsync: "sometimes" is not an fsync policy; want group, always, interval or never`},
		{"approver token missing", "approvals:\n  approvers:\n    - {name: oncall, token_file: " + filepath.Join(dir, "none") + "}\n", nil,
			"FILE:3: approvals.approvers[0].token_file: open " + filepath.Join(dir, "none") + ": no such file or directory; want a readable file"},
		{"approver token short", "approvals:\n  approvers:\n    - {name: oncall, token_file: " + short + "}\n", nil,
			"FILE:3: approvals.approvers[0].token_file: " + short + " holds a token of 5 characters; want at least 16"},
		{"listen in the file", "listen:\n  - 127.0.0.1:3128\n  - 127.0.0.1:99999\n", nil,
			`FILE:3: listen[1]: "127.0.0.1:99999": port 99999 is out of range; want HOST:PORT with a port from 1 to 65535`},
		{"listen flag", "", []string{"--listen", "127.0.0.1:99999"},
			`--listen: "127.0.0.1:99999": port 99999 is out of range`},
		{"admin listen flag", "", []string{"--admin-listen", "nowhere"},
			`--admin-listen: "nowhere" is not an address; want HOST:PORT`},
		{"policy file", "", []string{"--policy", policyFile},
			"--policy: " + policyFile + " is a file, not a policy; want a directory holding .rego files, an OPA bundle (.tar.gz) or a bundle URL"},
		{"policy dir without rego", "policy: " + dir + "\n", nil,
			"FILE:1: policy: load policy " + dir + ": no .rego files; want a directory holding .rego files, an OPA bundle (.tar.gz) or a bundle URL"},
		{"memory", "sandbox: {memory: 1}\n", nil,
			`FILE:1: sandbox.memory: "1" is 1 bytes, below the minimum of 16M`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.flags
			cfgPath := ""
			if tt.yaml != "" {
				cfgPath = writeConfig(t, tt.yaml)
				args = append([]string{"--config", cfgPath}, args...)
			}
			want := strings.ReplaceAll(tt.want, "FILE", cfgPath)
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
		})
	}
}

// TestCheckReportsAllProblemsAtOnce: a config with several problems gets them all, in the
// order of the file, from the file's decoding and from validation alike.
func TestCheckReportsAllProblemsAtOnce(t *testing.T) {
	p := writeConfig(t, "approvals:\n  timout: 5m\n  timeout: 5 minutes\nlimits:\n  upstream_header_timeout: 60\nrequire_auth: maybe\naudit: {fsync: sometimes}\nlog: {level: loud}\n")
	_, _, err := runCheckArgs(t, "--config", p, "--listen", "127.0.0.1:99999")
	got := errorLines(err)
	want := []string{"--listen: ", p + ":2: approvals.timout: ", p + ":3: approvals.timeout: ", p + ":5: limits.upstream_header_timeout: ",
		p + ":6: require_auth: ", p + ":7: audit.fsync: ", p + ":8: log.level: "}
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
	out, errOut, err := runCheckArgs(t)
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

func TestSuggest(t *testing.T) {
	known := []string{"timeout", "store", "webhook", "approvers", "max_body"}
	for in, want := range map[string]string{"timout": "timeout", "tiemout": "timeout", "approver": "approvers", "stor": "store", "max-body": "max_body", "colour": "", "x": ""} {
		if got := suggest(in, known); got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
}
