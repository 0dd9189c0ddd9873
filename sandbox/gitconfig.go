package sandbox

import "strings"

// gitConfig is what WorkspaceProtections reads of git config files: their entries, each
// key as "section.key" or "section.subsection.key" with section and key lower-cased (as
// git compares them) and the subsection as written.
type gitConfig struct{ entries []gitEntry }

type gitEntry struct{ key, value string }

// all is every value of key (lower-case section and name), in file order.
func (c gitConfig) all(key string) []string {
	var out []string
	for _, e := range c.entries {
		if e.key == key {
			out = append(out, e.value)
		}
	}
	return out
}

// last is key's effective value (the last one), or "".
func (c gitConfig) last(key string) string {
	v := c.all(key)
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// includes are the files the config includes: include.path and includeIf.*.path (every
// condition counts: airlock protects what git might read).
func (c gitConfig) includes() []string {
	var out []string
	for _, e := range c.entries {
		if e.value != "" && (e.key == "include.path" || strings.HasPrefix(e.key, "includeif.") && strings.HasSuffix(e.key, ".path")) {
			out = append(out, e.value)
		}
	}
	return out
}

// parseGitConfig reads git's config syntax: [section] and [section "subsection"] headers
// (and the older [section.subsection]), name = value lines, a name alone (true), quoted
// values, backslash escapes, line continuations and # or ; comments. What it cannot make
// sense of, it skips to the end of the line, as it would a comment.
func parseGitConfig(text string) gitConfig {
	var c gitConfig
	p := &cfgParser{s: text}
	section := ""
	for p.i < len(p.s) {
		switch ch := p.s[p.i]; {
		case ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n':
			p.i++
		case ch == '#' || ch == ';':
			p.skipLine()
		case ch == '[':
			if s, ok := p.header(); ok {
				section = s
			} else {
				section = ""
				p.skipLine()
			}
		case isNameChar(ch):
			start := p.i
			for p.i < len(p.s) && isNameChar(p.s[p.i]) {
				p.i++
			}
			name := strings.ToLower(p.s[start:p.i])
			p.skipBlanks()
			value := ""
			if p.i < len(p.s) && p.s[p.i] == '=' {
				p.i++
				value = p.value()
			} else if p.i < len(p.s) && p.s[p.i] != '\n' && p.s[p.i] != '#' && p.s[p.i] != ';' && p.s[p.i] != '\r' {
				p.skipLine()
				continue
			}
			if section != "" {
				c.entries = append(c.entries, gitEntry{key: section + "." + name, value: value})
			}
		default:
			p.skipLine()
		}
	}
	return c
}

type cfgParser struct {
	s string
	i int
}

func isNameChar(ch byte) bool {
	return ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-'
}

func (p *cfgParser) skipLine() {
	for p.i < len(p.s) && p.s[p.i] != '\n' {
		p.i++
	}
}

func (p *cfgParser) skipBlanks() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// header reads "[section]", "[section "sub"]" or "[section.sub]" at p.i.
func (p *cfgParser) header() (string, bool) {
	p.i++ // '['
	start := p.i
	for p.i < len(p.s) && (isNameChar(p.s[p.i]) || p.s[p.i] == '.') {
		p.i++
	}
	name := strings.ToLower(p.s[start:p.i])
	// An empty part ("[.]", "[.core]", "[core.]") names no section git reads settings of:
	// its keys ("..x", ".core.hookspath") match none git looks up.
	if name == "" || p.i >= len(p.s) || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
		return "", false
	}
	if p.s[p.i] == ']' {
		p.i++
		return name, true
	}
	p.skipBlanks()
	if p.i >= len(p.s) || p.s[p.i] != '"' || strings.Contains(name, ".") {
		return "", false
	}
	p.i++
	var sub strings.Builder
	for p.i < len(p.s) && p.s[p.i] != '"' {
		if p.s[p.i] == '\n' {
			return "", false
		}
		if p.s[p.i] == '\\' && p.i+1 < len(p.s) {
			p.i++
		}
		sub.WriteByte(p.s[p.i])
		p.i++
	}
	if p.i+1 >= len(p.s) || p.s[p.i+1] != ']' {
		return "", false
	}
	p.i += 2
	return name + "." + sub.String(), true
}

// value reads a value after '=' up to the end of its (possibly continued) line.
func (p *cfgParser) value() string {
	p.skipBlanks()
	var b strings.Builder
	quoted := false
	trailing := 0 // blanks at the end of b, outside quotes: dropped if the value ends
	for p.i < len(p.s) {
		ch := p.s[p.i]
		switch {
		case ch == '\n':
			p.i++
			return b.String()[:b.Len()-trailing]
		case !quoted && (ch == '#' || ch == ';'):
			p.skipLine()
			return b.String()[:b.Len()-trailing]
		case ch == '"':
			quoted = !quoted
			trailing = 0
			p.i++
			continue
		case ch == '\\' && p.i+1 < len(p.s):
			p.i++
			switch e := p.s[p.i]; e {
			case '\n':
				p.i++
				continue // continuation
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case 'b':
				b.WriteByte('\b')
			default:
				b.WriteByte(e)
			}
			trailing = 0
		case !quoted && (ch == ' ' || ch == '\t' || ch == '\r'):
			if b.Len() > 0 {
				b.WriteByte(ch)
				trailing++
			}
		default:
			b.WriteByte(ch)
			trailing = 0
		}
		p.i++
	}
	return b.String()[:b.Len()-trailing]
}
