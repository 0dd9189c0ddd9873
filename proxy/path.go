package proxy

import (
	"fmt"
	"strings"
)

// NormalizePath returns the path the policy sees and the upstream receives: percent-encoded
// unreserved characters decoded (%61 → a, %2e → .), other escapes upper-cased, empty
// segments collapsed ("//" → "/"), and dot segments removed, where a segment counts as a dot
// segment also when it carries ";params" ("..;x" is ".."), as some servers read it. An
// encoded slash (%2F) stays encoded. A path that climbs above the root is refused.
func NormalizePath(escaped string) (string, error) {
	if escaped == "" || escaped == "*" {
		return "/", nil
	}
	if escaped[0] != '/' {
		return "", fmt.Errorf("path %q does not start with /", escaped)
	}
	dec, err := decodeUnreserved(escaped)
	if err != nil {
		return "", err
	}
	segs := strings.Split(dec[1:], "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		name := s
		if j := strings.IndexByte(name, ';'); j >= 0 {
			name = name[:j]
		}
		switch {
		case name == ".":
		case name == "..":
			if len(out) == 0 {
				return "", fmt.Errorf("path %q climbs above the root", escaped)
			}
			out = out[:len(out)-1]
		case s == "" && i != len(segs)-1:
			// "//" collapses
		default:
			out = append(out, s)
			continue
		}
		if i == len(segs)-1 {
			out = append(out, "") // a trailing dot segment leaves a directory path
		}
	}
	p := "/" + strings.Join(out, "/")
	return p, nil
}

func decodeUnreserved(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
			return "", fmt.Errorf("path %q has a malformed %%-escape", s)
		}
		v := unhex(s[i+1])<<4 | unhex(s[i+2])
		if isUnreserved(v) {
			b.WriteByte(v)
		} else {
			b.WriteByte('%')
			b.WriteString(strings.ToUpper(s[i+1 : i+3]))
		}
		i += 2
	}
	return b.String(), nil
}

func isUnreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}
