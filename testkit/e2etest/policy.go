package e2etest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-proxy/airlock/rego"
)

// Policy compiles policy (and data, a data.json document, unless empty) from a temporary
// directory, with the engine options o (its Dir is that directory).
func Policy(t testing.TB, policy, data string, o rego.Options) *rego.Engine {
	t.Helper()
	o.Dir = t.TempDir()
	files := map[string]string{"policy.rego": policy}
	if data != "" {
		files["data.json"] = data
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(o.Dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	eng, err := rego.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}
