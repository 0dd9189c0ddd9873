package sandbox

import (
	"slices"
	"strings"
	"testing"
)

func TestParseGitConfig(t *testing.T) {
	text := `# comment
[core]
	hooksPath = "my hooks" ; comment
	fsmonitor
	bare = false
[Core] HooksPath = second\
line
[include]
	path = ../a.cfg
[includeIf "gitdir:~/work/"]
	path = "b.cfg"
[remote "Origin"]
	url = https://x/y # trailing
[bad
	path = nope
[section.Sub]
	key = v\tw
`
	c := parseGitConfig(text)
	if got := c.all("core.hookspath"); !slices.Equal(got, []string{"my hooks", "secondline"}) {
		t.Errorf("hooksPath %q", got)
	}
	if got := c.includes(); !slices.Equal(got, []string{"../a.cfg", "b.cfg"}) {
		t.Errorf("includes %q", got)
	}
	if got := c.last("remote.Origin.url"); got != "https://x/y" {
		t.Errorf("url %q", got)
	}
	if got := c.last("section.sub.key"); got != "v\tw" {
		t.Errorf("dotted section %q", got)
	}
	if got := c.all("core.fsmonitor"); !slices.Equal(got, []string{""}) {
		t.Errorf("boolean %q", got)
	}
}

func FuzzParseGitConfig(f *testing.F) {
	f.Add("[core]\n\thooksPath = x\n[include]\npath=y\n")
	f.Add("[a \"b\\\"c\"] k = \"v ; w\" \\\n z")
	f.Add("[.]00000") // found by CI's fuzzing: a section with an empty part
	f.Fuzz(func(t *testing.T, text string) {
		for _, e := range parseGitConfig(text).entries {
			section, _, _ := strings.Cut(e.key, ".")
			if section == "" || section != strings.ToLower(section) {
				t.Fatalf("key %q: section not lower-case", e.key)
			}
		}
	})
}
