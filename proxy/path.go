package proxy

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// NormalizePath returns the path the policy sees and the upstream receives, from the path as
// the client sent it: percent-encoded unreserved characters decoded (%61 → a, %2e → .), other
// escapes upper-cased, bytes that may not stand raw in a path %-escaped ('"' → %22, "é" →
// %C3%A9), empty segments collapsed ("//" → "/"), and dot segments removed. Refused, because
// servers read them differently: ';' (path parameters, which some servers drop from a
// segment), a raw backslash (read as '/' by some), a dot segment hidden behind an encoded
// slash or backslash ("..%2F", "%5C.."), a malformed escape, escapes that decode to NUL or to
// bytes that are not UTF-8, and a path that climbs above the root. An encoded slash (%2F)
// otherwise stays encoded.
func NormalizePath(escaped string) (string, error) {
	if escaped == "" || escaped == "*" {
		return "/", nil
	}
	if escaped[0] != '/' {
		return "", fmt.Errorf("path %q does not start with /", escaped)
	}
	canon, err := canonicalPathEscapes(escaped)
	if err != nil {
		return "", err
	}
	segs := strings.Split(canon[1:], "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		switch {
		case s == ".":
		case s == "..":
			if len(out) == 0 {
				return "", fmt.Errorf("path %q climbs above the root", escaped)
			}
			out = out[:len(out)-1]
		case s == "" && i != len(segs)-1:
			// "//" collapses
		case hidesDotSegment(s):
			return "", fmt.Errorf("path segment %q hides a dot segment behind an encoded slash or backslash, which some servers decode before resolving dot segments", s)
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

// canonicalPathEscapes rewrites every byte of an escaped path to one spelling: unreserved
// characters and the others a path may hold raw (isPathRaw) raw, everything else as an
// upper-case %XX.
func canonicalPathEscapes(s string) (string, error) {
	var b strings.Builder
	b.Grow(len(s))
	ascii := true // every decoded byte so far is ASCII
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ';':
			return "", fmt.Errorf("path %q contains ';' (path parameters, which some servers drop from a segment and others keep); send a literal ';' as %%3B", s)
		case c == '\\':
			return "", fmt.Errorf("path %q contains a backslash, which some servers read as '/'; send a literal backslash as %%5C", s)
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return "", fmt.Errorf("path %q has a malformed %%-escape", s)
			}
			c = unhex(s[i+1])<<4 | unhex(s[i+2])
			i += 2
			if isUnreserved(c) {
				b.WriteByte(c)
			} else {
				writeEscaped(&b, c)
			}
		case isUnreserved(c) || isPathRaw(c):
			b.WriteByte(c)
		default:
			writeEscaped(&b, c)
		}
		if c == 0 {
			return "", fmt.Errorf("path %q contains %%00, at which some servers cut it short", s)
		}
		ascii = ascii && c < utf8.RuneSelf
	}
	out := b.String()
	if !ascii && !decodesToUTF8(out) {
		return "", fmt.Errorf("path %q decodes to bytes that are not UTF-8, which servers read differently", s)
	}
	return out, nil
}

// decodesToUTF8 reports whether a canonical escaped path decodes to valid UTF-8.
func decodesToUTF8(canon string) bool {
	dec := make([]byte, 0, len(canon))
	for i := 0; i < len(canon); i++ {
		c := canon[i]
		if c == '%' {
			c = unhex(canon[i+1])<<4 | unhex(canon[i+2])
			i += 2
		}
		dec = append(dec, c)
	}
	return utf8.Valid(dec)
}

func writeEscaped(b *strings.Builder, c byte) {
	b.WriteByte('%')
	b.WriteByte(upperHex[c>>4])
	b.WriteByte(upperHex[c&15])
}

// isPathRaw reports the characters besides the unreserved ones that stand raw in a
// normalised path: RFC 3986's sub-delims but ';', and ':', '@' and '/'.
func isPathRaw(c byte) bool {
	return strings.IndexByte("!$&'()*+,=:@/", c) >= 0
}

// hidesDotSegment reports whether a segment is a dot segment once %2F or %5C in it is read as
// a separator ("..%2Fadmin", "a%5C..").
func hidesDotSegment(seg string) bool {
	if !strings.Contains(seg, "%2F") && !strings.Contains(seg, "%5C") {
		return false
	}
	for _, piece := range strings.Split(strings.ReplaceAll(seg, "%5C", "%2F"), "%2F") {
		if piece == "." || piece == ".." {
			return true
		}
	}
	return false
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
