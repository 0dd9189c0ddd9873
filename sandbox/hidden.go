package sandbox

import (
	"os"
	"path/filepath"
	"strings"
)

// A Bind is a host directory a sandbox sees, and where it sees it.
type Bind struct{ Host, Inside string }

// A HiddenTarget is a place inside a sandbox to cover, and whether it is a directory.
type HiddenTarget struct {
	Inside string
	Dir    bool
}

// HiddenTargets are the places inside a sandbox where it would see one of the host paths
// hidden (Options.HiddenPaths), given the host directories it binds. Each hidden path is
// resolved (a link to it is then hidden through its target); one that does not exist, or
// that no bind shows, has none. Backends cover each with an empty read-only file or
// directory, as they mask /proc.
func HiddenTargets(hidden []string, binds []Bind) []HiddenTarget {
	var out []HiddenTarget
	seen := map[string]bool{}
	for _, h := range hidden {
		real, err := filepath.EvalSymlinks(h)
		if err != nil {
			continue
		}
		fi, err := os.Stat(real)
		if err != nil {
			continue
		}
		for _, b := range binds {
			host, err := filepath.EvalSymlinks(b.Host)
			if err != nil {
				continue
			}
			rel, err := filepath.Rel(host, real)
			if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				continue
			}
			inside := filepath.Join(b.Inside, rel)
			if !seen[inside] {
				seen[inside] = true
				out = append(out, HiddenTarget{Inside: inside, Dir: fi.IsDir()})
			}
		}
	}
	return out
}
