package main

import (
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/airlock-proxy/airlock/"

// layerRule says which of the module's packages a package may import: allowed reports
// whether from may import to (both relative to the module root).
type layerRule struct {
	name    string
	applies func(from string) bool
	allowed func(to string) bool
}

func under(prefixes ...string) func(string) bool {
	return func(p string) bool {
		for _, pre := range prefixes {
			if p == pre || strings.HasPrefix(p, pre+"/") {
				return true
			}
		}
		return false
	}
}

func not(f func(string) bool) func(string) bool { return func(p string) bool { return !f(p) } }

// layers is the import direction docs/architecture.md promises: internal/ is the bottom
// layer, the leaves stand on it alone, the sandbox module knows nothing of the proxy, and
// only tests reach testkit/.
var layers = []layerRule{
	{"internal/ is the bottom layer", under("internal"), under("internal")},
	{"leaves import only internal/", under("rego", "secrets", "approval", "audit", "telemetry", "ca", "admin"), under("internal")},
	{"sandbox knows nothing of the proxy", under("sandbox"), under("sandbox", "internal")},
	{"proxy imports leaves, not their users", under("proxy"), not(under("cmd", "session", "sandbox", "admin", "testkit"))},
	{"session is not below the proxy or cmd", under("session"), not(under("cmd", "proxy", "admin", "testkit"))},
	{"only tests import testkit/", not(under("testkit", "e2e", "bench")), not(under("testkit"))},
}

// violations lists every import in graph (package → its imports, module-relative) that a
// rule forbids, as "from → to (rule)".
func violations(graph map[string][]string) []string {
	var out []string
	for from, imports := range graph {
		for _, r := range layers {
			if !r.applies(from) {
				continue
			}
			for _, to := range imports {
				if !r.allowed(to) {
					out = append(out, from+" → "+to+" ("+r.name+")")
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

func TestImportLayers(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go command")
	}
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...")
	cmd.Dir = "../.."
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		from := strings.TrimPrefix(f[0], module)
		graph[from] = nil
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, module) {
				graph[from] = append(graph[from], strings.TrimPrefix(imp, module))
			}
		}
	}
	for _, p := range []string{"proxy", "rego", "sandbox", "internal/redact", "cmd/airlock"} {
		if _, ok := graph[p]; !ok {
			t.Fatalf("go list did not list %s; the graph is not the module's", p)
		}
	}
	for _, v := range violations(graph) {
		t.Errorf("import against the layering: %s", v)
	}
}

// TestImportLayersCatch proves the rules bite: each import below breaks one.
func TestImportLayersCatch(t *testing.T) {
	for from, to := range map[string]string{
		"internal/redact": "audit",
		"audit":           "rego",
		"sandbox/native":  "proxy",
		"proxy":           "session",
		"session":         "proxy",
		"approval":        "testkit/pgtest",
		"cmd/airlock":     "testkit/e2etest",
	} {
		if v := violations(map[string][]string{from: {to}}); len(v) == 0 {
			t.Errorf("%s importing %s passes the rules", from, to)
		}
	}
	if v := violations(map[string][]string{"proxy": {"rego", "internal/event"}, "e2e/clients": {"testkit/e2etest"}}); len(v) != 0 {
		t.Errorf("allowed imports refused: %v", v)
	}
}

// TestNoClientset: the binary does not link client-go's generated clientset. Its scheme
// registers every API group when the package loads, 5–20 ms at the start of every airlock
// process; the kubernetes backend has its own small client (sandbox/kubernetes.Client) and
// only tests may use the clientset (sandbox/kubernetes/kubetest).
func TestNoClientset(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command")
	}
	b, err := exec.Command(gobin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(b))
	if !slices.Contains(deps, module+"sandbox/kubernetes") {
		t.Fatalf("go list -deps did not list the kubernetes backend; not the binary's dependencies: %d packages", len(deps))
	}
	for _, d := range deps {
		if d == "k8s.io/client-go/kubernetes" || strings.HasPrefix(d, "k8s.io/client-go/kubernetes/") {
			t.Errorf("the airlock binary links %s", d)
		}
	}
}
