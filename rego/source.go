package rego

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/loader"
	"github.com/open-policy-agent/opa/v1/tester"
)

// policySource is one loaded, parsed but not yet compiled version of a policy.
type policySource struct {
	modules  map[string]*ast.Module // by file name; includes *_test.rego files
	data     map[string]any         // the data documents, merged
	revision string                 // bundle manifest revision, or sha256 of the files
	source   string                 // where it came from, for Status and logs
}

// isTestFile reports whether a module file holds tests rather than policy.
func isTestFile(name string) bool { return strings.HasSuffix(name, "_test.rego") }

// withoutTests is a policy file system without its *_test.rego files.
type withoutTests struct{ fs.FS }

func (w withoutTests) Open(name string) (fs.File, error) {
	if isTestFile(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return w.FS.Open(name)
}

func (w withoutTests) ReadDir(name string) ([]fs.DirEntry, error) {
	entries, err := fs.ReadDir(w.FS, name)
	return slices.DeleteFunc(entries, func(e fs.DirEntry) bool { return isTestFile(e.Name()) }), err
}

// policyModules returns the modules that make up the policy itself, without tests.
func (s *policySource) policyModules() map[string]*ast.Module {
	out := make(map[string]*ast.Module, len(s.modules))
	for name, m := range s.modules {
		if !isTestFile(name) {
			out[name] = m
		}
	}
	return out
}

// hasTests reports whether the source holds any test: a *_test.rego file, or a rule that
// OPA's test runner (and `opa test`) runs as a test wherever it is (red team: a failing
// test in checks.rego did not stop its policy from loading).
func (s *policySource) hasTests() bool {
	for name, m := range s.modules {
		if isTestFile(name) || slices.ContainsFunc(m.Rules, isTestRule) {
			return true
		}
	}
	return false
}

// isTestRule reports whether OPA's test runner runs r: a part of its name's ground prefix
// (test_x, or p.test_x for a rule with a dotted name) starts with test_ or todo_test_.
func isTestRule(r *ast.Rule) bool {
	for _, t := range r.Head.Ref().GroundPrefix() {
		var n string
		switch v := t.Value.(type) {
		case ast.Var:
			n = string(v)
		case ast.String:
			n = string(v)
		}
		if strings.HasPrefix(n, tester.TestPrefix) || strings.HasPrefix(n, tester.SkipTestPrefix) {
			return true
		}
	}
	return false
}

// loadDir loads a policy directory the way `opa eval -d DIR` and `opa test DIR` do: every
// .rego file, and .json/.yaml documents merged under data at their directory's path. A nil
// fsys reads the operating system's files.
func loadDir(fsys fs.FS, dir, source string) (*policySource, error) {
	fl := loader.NewFileLoader().WithProcessAnnotation(true).WithRegoVersion(ast.RegoV1)
	if fsys != nil {
		fl = fl.WithFS(fsys)
	}
	res, err := fl.Filtered([]string{dir}, skipHidden)
	if err != nil {
		return nil, fmt.Errorf("load policy %s: %w", source, err)
	}
	if len(res.Modules) == 0 {
		return nil, fmt.Errorf("load policy %s: no .rego files; want a directory holding .rego files, an OPA bundle (.tar.gz) or a bundle URL", source)
	}
	h := sha256.New()
	names := slices.Sorted(maps.Keys(res.Modules))
	modules := make(map[string]*ast.Module, len(names))
	for _, k := range names {
		f := res.Modules[k]
		modules[f.Name] = f.Parsed
		fmt.Fprintf(h, "%s\x00%d\x00", f.Name, len(f.Raw))
		h.Write(f.Raw)
	}
	data := res.Documents
	if data == nil {
		data = map[string]any{}
	}
	// encoding/json sorts map keys, so equal documents hash equally.
	b, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("load policy %s: hash data: %w", source, err)
	}
	h.Write(b)
	return &policySource{
		modules:  modules,
		data:     data,
		revision: "sha256:" + hex.EncodeToString(h.Sum(nil)),
		source:   source,
	}, nil
}

// skipHidden leaves out dot files and directories below the policy directory (editor lock
// and swap files, .git).
func skipHidden(_ string, info fs.FileInfo, depth int) bool {
	return depth > 0 && strings.HasPrefix(info.Name(), ".")
}

// fromBundle turns a read OPA bundle into a policy source. raw is the bundle file, hashed for
// the revision when the manifest names none.
func fromBundle(b *bundle.Bundle, raw []byte, source string) (*policySource, error) {
	if len(b.Modules) == 0 {
		return nil, fmt.Errorf("load bundle %s: no .rego files; want a bundle holding the policy's .rego files", source)
	}
	modules := make(map[string]*ast.Module, len(b.Modules))
	for _, m := range b.Modules {
		modules[m.Path] = m.Parsed
	}
	data := b.Data
	if data == nil {
		data = map[string]any{}
	}
	rev := b.Manifest.Revision
	if rev == "" {
		sum := sha256.Sum256(raw)
		rev = "sha256:" + hex.EncodeToString(sum[:])
	}
	return &policySource{modules: modules, data: data, revision: rev, source: source}, nil
}
