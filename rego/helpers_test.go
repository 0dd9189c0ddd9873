package rego

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testEvalTimeout replaces the 250ms default evaluation timeout in tests and benchmarks: the
// machines they run on are shared, and a descheduled evaluation must not fail a test that is
// not about timeouts.
const testEvalTimeout = 10 * time.Second

// writeShippedRules copies the shipped .rego files (rules and tests, not data.json) into dir.
func writeShippedRules(tb testing.TB, dir string) {
	tb.Helper()
	err := fs.WalkDir(ShippedPolicy(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".rego") {
			return err
		}
		b, err := fs.ReadFile(ShippedPolicy(), p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, p), b, 0o644)
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// writeShippedData copies the shipped data.json into dir.
func writeShippedData(tb testing.TB, dir string) {
	tb.Helper()
	b, err := fs.ReadFile(ShippedPolicy(), "data.json")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data.json"), b, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// writeShippedRulesOnly copies the shipped rules without their tests, for a policy whose
// data is not the shipped data.json, which those tests read.
func writeShippedRulesOnly(tb testing.TB, dir string) {
	tb.Helper()
	writeShippedRules(tb, dir)
	tests, _ := filepath.Glob(filepath.Join(dir, "*_test.rego"))
	for _, f := range tests {
		if err := os.Remove(f); err != nil {
			tb.Fatal(err)
		}
	}
}

// openEvilRule is a rule that allows anything to evil.example: added to a policy that must
// never be used, it shows when one was.
const openEvilRule = "package airlock\n\nallow contains {\"action\": \"allow\", \"rule\": \"rt.open\", \"reason\": \"open\", \"credentials\": [], \"tunnel\": true} if input.request.host == \"evil.example\"\n"

// writeFiles writes name → content files into dir.
func writeFiles(tb testing.TB, dir string, files map[string]string) {
	tb.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}
