package sandbox

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseSize parses a byte size such as "512M", "2G", "64k" or "1048576" (k, M, G, T are
// powers of 1024; an optional trailing "B" or "iB" is accepted).
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "i")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k', 'K':
			mult = 1 << 10
		case 'm', 'M':
			mult = 1 << 20
		case 'g', 'G':
			mult = 1 << 30
		case 't', 'T':
			mult = 1 << 40
		}
		if mult != 1 {
			t = t[:n-1]
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || n < 0 || t == "" {
		return 0, fmt.Errorf("size %q: want a number with an optional k, M or G suffix", s)
	}
	v := n * float64(mult)
	if v > float64(1<<62) {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return int64(v), nil
}

// ParseWorkspace parses the --workspace flag: "DIR", "DIR:rw", "DIR:ro" or "DIR:cow".
func ParseWorkspace(s string) (string, WorkspaceMode, error) {
	dir, mode := s, WorkspaceRW
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		switch m := WorkspaceMode(s[i+1:]); m {
		case WorkspaceRW, WorkspaceRO, WorkspaceCoW:
			dir, mode = s[:i], m
		}
	}
	if dir == "" {
		return "", "", fmt.Errorf("workspace %q: empty directory", s)
	}
	return dir, mode, nil
}

// ParseKV parses a K=V flag value (--label, --env).
func ParseKV(s string) (string, string, error) {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return "", "", fmt.Errorf("%q: want K=V", s)
	}
	return k, v, nil
}
