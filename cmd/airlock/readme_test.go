package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// readmeSection is the text of README.md's "## NAME" section.
func readmeSection(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n## "+name+"\n")
	if !ok {
		t.Fatalf("README.md has no %q section", "## "+name)
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

var shBlock = regexp.MustCompile("(?s)```sh\n(.*?)```")

// TestReadmeFirstHour: what a new user reads first. Set up has exactly its two commands
// and says what the first run downloads and writes, and where; "Using airlock" starts
// with the one command that puts airlock on PATH, and it names the command it installs.
// (e2e/readme runs the first command from a fresh clone and checks its output.)
func TestReadmeFirstHour(t *testing.T) {
	setUp := readmeSection(t, "Set up")
	if n := len(shBlock.FindAllString(setUp, -1)); n != 2 {
		t.Errorf("Set up has %d sh blocks, want exactly the two commands", n)
	}
	for _, claim := range []string{
		"downloads airlock's Go modules", "GOMODCACHE", "GOCACHE", // the first go run
		"~/.local/state/airlock", "$AIRLOCK_HOME", "ca/", "audit.jsonl", "approvals.db", // the first run's state
		"/run/airlock", // each sandbox's runtime files
	} {
		if !strings.Contains(setUp, claim) {
			t.Errorf("Set up does not say %q", claim)
		}
	}
	using := strings.TrimLeft(readmeSection(t, "Using airlock"), "\n")
	m := shBlock.FindStringSubmatchIndex(using)
	if m == nil || m[0] != 0 {
		t.Fatalf("Using airlock does not start with a command: %.80q", using)
	}
	if cmd := strings.TrimSpace(using[m[2]:m[3]]); cmd != "GOBIN=/usr/local/bin go install ./cmd/airlock" {
		t.Errorf("Using airlock starts with %q, want the command that installs airlock on PATH", cmd)
	}
	if !strings.Contains(using, "installs the `airlock` binary on PATH") {
		t.Error("Using airlock does not say where the command puts airlock")
	}
}
