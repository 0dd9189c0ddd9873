package termsafe

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Text quotes s for printing on a terminal as part of airlock's own messages: control
// characters (C0 with newline and tab, DEL, C1), other non-printable runes (bidirectional
// overrides among them) and invalid UTF-8 are written as Go escapes (\n, \x1b, \u202e), so
// that a file name or error text from a sandbox can neither act on the terminal nor forge a
// line of airlock's output. Printable text, non-ASCII included, is left as is.
func Text(s string) string {
	clean := utf8.ValidString(s)
	for _, r := range s {
		if !clean || !printable(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case printable(r):
			b.WriteString(s[i : i+n])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	return b.String()
}

func printable(r rune) bool { return Visible(r) }

// Visible reports whether r shows on a screen as itself: a printable rune (letters, marks,
// numbers, punctuation, symbols, the ASCII space) that is not drawn blank. Control
// characters, format characters (the bidirectional overrides and isolates U+202A-U+202E and
// U+2066-U+2069, zero-width spaces and joiners U+200B-U+200F, U+FEFF, tag characters),
// separators other than the space (U+00A0, U+2028) and the letters and symbols fonts draw
// as nothing (U+115F, U+1160, U+3164, U+FFA0, U+2800) are not: text from a sandbox that
// holds them can look like something else than it is.
func Visible(r rune) bool {
	switch r {
	case ' ':
		return true
	case 0x115F, 0x1160, 0x3164, 0xFFA0, 0x2800, 0x034F, 0x17B4, 0x17B5:
		return false // Hangul fillers, braille blank, combining grapheme joiner, Khmer inherent vowels
	}
	return unicode.IsPrint(r) && !unicode.In(r, unicode.Variation_Selector)
}

// JSON makes encoded JSON safe to print on a terminal and to show to a person: every rune
// that is not Visible (see Visible) inside it is written as a JSON escape (\u202e; a
// surrogate pair beyond U+FFFF), so the output is the same JSON, parsed, but a reversed or
// hidden string shows as what it is. Newlines, the only whitespace JSON's own layout uses
// besides spaces, are kept; b must be valid UTF-8 (as encoding/json writes it).
func JSON(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == '\n' || Visible(r) && !(r == utf8.RuneError && n <= 1) {
			if out != nil {
				out = append(out, b[i:i+n]...)
			}
			i += n
			continue
		}
		if out == nil {
			out = append(make([]byte, 0, len(b)+16), b[:i]...)
		}
		if r == utf8.RuneError && n <= 1 {
			r = utf8.RuneError
		}
		if r > 0xFFFF {
			r1, r2 := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
	}
	if out == nil {
		return b
	}
	return out
}
