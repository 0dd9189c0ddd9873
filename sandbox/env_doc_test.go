package sandbox

import (
	"os"
	"strings"
	"testing"
)

// TestClientsDocListsTheEnvironment: docs/clients.md's table of a sandbox's environment
// names every variable airlock sets (with a CA bundle), so that a client's variable the
// table lacks (npm_config_cafile was once missing) is caught here.
func TestClientsDocListsTheEnvironment(t *testing.T) {
	b, err := os.ReadFile("../docs/clients.md")
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| `") {
			table.WriteString(line + "\n")
		}
	}
	for _, kv := range baseEnv(Options{CABundle: []byte("-----PEM-----\n")}) {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PATH", "HOME", "LANG", "USER", "TMPDIR":
			continue // the usual ones, not the clients'
		}
		if !strings.Contains(table.String(), "`"+name+"`") {
			t.Errorf("docs/clients.md's table lacks %s, which airlock sets in a sandbox", name)
		}
	}
}
