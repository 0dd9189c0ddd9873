package bench

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-proxy/airlock/rego"
)

// CredentialName is the credential the bench policy names; the airlock config maps it to
// an env source injected as "Authorization: Bearer {{ .value }}".
const CredentialName = "bench-token"

// allowAllPolicy allows every CONNECT (intercepted) and every request, with no credentials.
const allowAllPolicy = `package airlock

decision := {"action": "allow", "rule": "bench.allow-all", "reason": "the bench allows everything", "credentials": [], "tunnel": false}
`

// benchRules add a credentialed upstream in the shipped policies' idiom: a host list in
// data (data.hosts.bench) used by a connect rule and a request rule, beside the shipped
// rules, which all still run for every request.
const benchRules = `# The bench upstream: reads, with the entry's credential injected.
package airlock

allow contains {
	"action": "allow",
	"rule": "bench.connect",
	"reason": concat("", [input.request.host, " is the bench upstream"]),
	"credentials": [],
	"tunnel": false,
} if {
	input.phase == "connect"
	svc := data.hosts.bench[input.request.host]
	input.request.port in svc.ports
}

allow contains {
	"action": "allow",
	"rule": "bench.read",
	"reason": concat("", ["reading from the bench upstream ", input.request.host, " is allowed"]),
	"credentials": [svc.credential],
	"tunnel": false,
} if {
	input.phase == "request"
	svc := data.hosts.bench[input.request.host]
	input.request.method in {"GET", "HEAD"}
	input.request.port in svc.ports
}
`

// bodyAwarePolicy reads the bodies of POSTs to /mcp on the bench upstream (bodyAwareData)
// and allows its read tools by name, as the shipped mcp.rego does; any other request is
// allowed without its body being read.
const bodyAwarePolicy = `package airlock

default decision := {"action": "deny", "rule": "bench.deny", "reason": "not a read tool"}

decision := {"action": "allow", "rule": "bench.other", "reason": "not body-aware", "credentials": [], "tunnel": false} if input.request.path != "/mcp"

decision := {"action": "allow", "rule": "bench.mcp-read", "reason": "a read tool", "credentials": [], "tunnel": false} if {
	input.phase == "request"
	input.request.path == "/mcp"
	input.request.mcp.method == "tools/call"
	input.request.mcp.tool in {"search_issues", "get_issue"}
}
`

const bodyAwareData = `{"body_aware": {"127.0.0.1": ["/mcp"]}}`

// writeBodyAwarePolicy writes the body-aware policy and its data into dir.
func writeBodyAwarePolicy(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("policy dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "body_aware.rego"), []byte(bodyAwarePolicy), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "data.json"), []byte(bodyAwareData), 0o644)
}

// writeAllowAllPolicy writes the allow-all policy into dir.
func writeAllowAllPolicy(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("policy dir: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "allow_all.rego"), []byte(allowAllPolicy), 0o644)
}

// writeShippedPolicy writes the shipped rules and data into dir, plus bench.rego and a
// data.hosts.bench entry for host on ports.
func writeShippedPolicy(dir, host string, ports []int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("policy dir: %w", err)
	}
	shipped := rego.ShippedPolicy()
	var data map[string]any
	err := fs.WalkDir(shipped, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(shipped, path)
		if err != nil {
			return err
		}
		switch {
		case path == "data.json":
			return json.Unmarshal(b, &data)
		case strings.HasSuffix(path, ".rego") && !strings.HasSuffix(path, "_test.rego"):
			return os.WriteFile(filepath.Join(dir, filepath.Base(path)), b, 0o644)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("copy shipped policy: %w", err)
	}
	hosts, ok := data["hosts"].(map[string]any)
	if !ok {
		return fmt.Errorf("shipped data.json has no hosts object")
	}
	hosts["bench"] = map[string]any{host: map[string]any{"credential": CredentialName, "ports": ports}}
	out, err := json.MarshalIndent(data, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "data.json"), out, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "bench.rego"), []byte(benchRules), 0o644)
}
