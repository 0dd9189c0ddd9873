//go:build e2e

// Package readme_test runs what the README tells a new user to run, as it is written there,
// from a fresh clone: the README and the program cannot drift apart. Run as root:
//
//	go test -tags e2e -count=1 ./e2e/readme/
package readme_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// setUpCommands are the sh blocks of the README's "## Set up" section, in order.
func setUpCommands(t *testing.T, readme string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, "\n## Set up\n")
	if !ok {
		t.Fatal("README.md has no \"## Set up\" section")
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	var out []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(rest, -1) {
		out = append(out, strings.TrimSpace(m[1]))
	}
	return out
}

// TestReadmeMainCommand: the Set up section has exactly two commands, and the first, run
// in a fresh clone of this repository, shows what the README promises: the Go module proxy
// read works (through interception) and example.com is refused with its rule and reason.
// It also checks the README's claims of what the first run writes, and where.
func TestReadmeMainCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the README's command runs a sandbox, which needs root")
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	root := strings.TrimSpace(string(top))
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	cmds := setUpCommands(t, readme)
	if len(cmds) != 2 || cmds[1] != "bash scripts/test.sh" {
		t.Fatalf("README Set up has commands %q; want exactly two, the second bash scripts/test.sh", cmds)
	}
	for _, claim := range []string{"~/.local/state/airlock", "/run/airlock", "go install ./cmd/airlock"} {
		if !strings.Contains(readme, claim) {
			t.Errorf("README does not mention %s", claim)
		}
	}

	clone := filepath.Join(t.TempDir(), "airlock")
	if out, err := exec.Command("git", "clone", "--quiet", "--no-hardlinks", root, clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", cmds[0])
	cmd.Dir = clone
	// A fresh user's state directory (the README says where the first run writes).
	// Go's caches stay where they are: the module proxy is reachable from CI, but a cold
	// build of every dependency would only make the test slow, not truer.
	goEnv, err := exec.Command("go", "env", "GOPATH", "GOMODCACHE", "GOCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	vals := strings.Split(strings.TrimSpace(string(goEnv)), "\n")
	cmd.Env = append(os.Environ(), "HOME="+home, "AIRLOCK_HOME=", "GOPATH="+vals[0], "GOMODCACHE="+vals[1], "GOCACHE="+vals[2])
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	out := stdout.String() + stderr.String()
	if err != nil {
		t.Fatalf("README's first command: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`(?m)^v\d+\.\d+\.\d+$`).MatchString(stdout.String()) {
		t.Errorf("no goproxy versions from proxy.golang.org in the output:\n%s", out)
	}
	for _, want := range []string{
		"airlock refused GET http://example.com/ (403 Forbidden)",
		"rule: default.deny",
		"reason: example.com port 80 is not on any allowlist of the airlock policy",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(home, ".local", "state", "airlock", "ca", "ca.pem")); err != nil {
		t.Errorf("the first run did not write its CA where the README says: %v", err)
	}
}
