package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestHelpReadsAsUsed: every command's help lists bool flags as they are typed (--check,
// not --check[=true|false]), and examples use approval ids of the form real ones have.
func TestHelpReadsAsUsed(t *testing.T) {
	id := regexp.MustCompile(`  airlock approvals (show|approve|deny|cancel) (\S+)`)
	var walk func(path []string, c *cobra.Command)
	walk = func(path []string, c *cobra.Command) {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(append(path, "--help"))
		if err := root.Execute(); err != nil {
			t.Fatalf("%v --help: %v", path, err)
		}
		help := out.String()
		if strings.Contains(help, "[=true|false]") {
			t.Errorf("airlock %s --help lists a bool flag as --flag[=true|false]", strings.Join(path, " "))
		}
		if !strings.Contains(help, "--help") {
			t.Errorf("airlock %s --help lists no flags", strings.Join(path, " "))
		}
		for _, m := range id.FindAllStringSubmatch(help, -1) {
			if m[2] != "ID" && !regexp.MustCompile(`^apr-[0-9a-f]{24}$`).MatchString(m[2]) {
				t.Errorf("airlock %s --help: example id %q is not like a real one (apr- and 24 hex digits)", strings.Join(path, " "), m[2])
			}
		}
		for _, sub := range c.Commands() {
			if sub.Name() != "help" && sub.Name() != "completion" {
				walk(append(append([]string{}, path...), sub.Name()), sub)
			}
		}
	}
	walk(nil, newRoot())
}
