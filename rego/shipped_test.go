package rego

import (
	"bytes"
	"context"
	"io/fs"
	"reflect"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"
)

// The shipped policy's own Rego tests run as part of `go test ./rego/`.
func TestShippedPolicyRegoTests(t *testing.T) {
	for _, dir := range []string{"", "."} {
		var out bytes.Buffer
		passed, failed, err := RunTests(context.Background(), dir, &out, false)
		if err != nil {
			t.Fatalf("RunTests(%q): %v", dir, err)
		}
		if failed != 0 || passed == 0 {
			t.Errorf("RunTests(%q): %d passed, %d failed; want all passed\n%s", dir, passed, failed, out.String())
		}
	}
}

// `opa fmt` leaves every shipped .rego file unchanged.
func TestShippedPolicyIsFormatted(t *testing.T) {
	names, err := fs.Glob(ShippedPolicy(), "*.rego")
	if err != nil || len(names) == 0 {
		t.Fatalf("no shipped .rego files: %v", err)
	}
	for _, name := range names {
		src, err := fs.ReadFile(ShippedPolicy(), name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := format.SourceWithOpts(name, src, format.Opts{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Errorf("format %s: %v", name, err)
			continue
		}
		if !bytes.Equal(got, src) {
			t.Errorf("%s is not formatted as `opa fmt` would write it; formatted:\n%s", name, got)
		}
	}
}

// `opa check --strict` accepts the shipped policy and its tests.
func TestShippedPolicyPassesStrictCheck(t *testing.T) {
	src, err := loadDir(ShippedPolicy(), ".", "shipped policy")
	if err != nil {
		t.Fatal(err)
	}
	c := ast.NewCompiler().WithStrict(true)
	if c.Compile(src.modules); c.Failed() {
		t.Fatalf("strict compile: %v", c.Errors)
	}
}

// The files in this directory are the embedded policy: `opa test rego/` and the binary agree.
// (OPA's loader also reads testdata/golden/*.json, as data.testdata; the policy never uses it.)
func TestEmbeddedPolicyMatchesDirectory(t *testing.T) {
	emb, err := loadDir(ShippedPolicy(), ".", "embedded")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := loadDir(nil, ".", ".")
	if err != nil {
		t.Fatal(err)
	}
	delete(dir.data, "testdata")
	if !reflect.DeepEqual(emb.data, dir.data) {
		t.Errorf("embedded data differs from the directory's")
	}
	if len(emb.modules) != len(dir.modules) {
		t.Errorf("%d embedded modules, %d in the directory", len(emb.modules), len(dir.modules))
	}
	for name, m := range emb.modules {
		if d, ok := dir.modules[name]; !ok || !m.Equal(d) {
			t.Errorf("embedded %s differs from the directory's", name)
		}
	}
}

// The engine evaluates the shipped policy without its test files (they pass above, and are
// not run again at every start), and `airlock policy test` still finds them.
func TestShippedPolicyLoadsWithoutTests(t *testing.T) {
	e, err := New(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := e.fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if src.hasTests() {
		t.Error("the engine's shipped policy source holds test files")
	}
	if len(src.policyModules()) == 0 {
		t.Fatal("no policy modules loaded")
	}
	all, err := loadDir(ShippedPolicy(), ".", "shipped policy")
	if err != nil {
		t.Fatal(err)
	}
	if !all.hasTests() || len(all.policyModules()) != len(src.policyModules()) {
		t.Errorf("full load: tests %v, %d policy modules; engine load: %d", all.hasTests(), len(all.policyModules()), len(src.policyModules()))
	}
}
