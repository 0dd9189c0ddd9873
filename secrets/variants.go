package secrets

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// A pattern is a sequence of units; a unit is every spelling one character (or, in hex, one
// digit) of a value may take in a response. Matching a pattern matches every mixture of those
// spellings: "Sk%2Dabc", "sk\u002dABC" and "SK-abc" are all one pattern for "sk-abc".
type unit [][]byte

type pattern []unit

// minEncodedLen is the shortest value also matched as hex, UTF-16 and base64: the encodings
// of shorter values are too short to tell apart from other data.
const minEncodedLen = 6

// patternsFor returns the patterns that find v in a response: as text in any letter case
// (Unicode simple folding) and with any of its characters escaped (URL percent-encoding in
// either hex case, `+` for a space, JSON and JavaScript `\uXXXX`, `\UXXXXXXXX`, `\u{X}`,
// `\xXX` and short escapes, HTML character references),
// and, for values of minEncodedLen bytes or more, as hex in either case, as UTF-16 (little
// and big endian), and as standard and URL-safe base64 with and without padding, including
// the three alignments v can have inside a longer base64 string.
func patternsFor(v string) []pattern {
	if v == "" {
		return nil
	}
	ps := []pattern{textPattern(v)}
	if len(v) < minEncodedLen {
		return ps
	}
	ps = append(ps, hexPattern(v), utf16Pattern(v, false), utf16Pattern(v, true))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		raw := enc.WithPadding(base64.NoPadding)
		forms := []string{raw.EncodeToString([]byte(v)), enc.EncodeToString([]byte(v))}
		// Inside a longer base64 string, v starts at a byte offset of 0, 1 or 2 modulo 3.
		// Only the characters made of v's bits alone are fixed; those are the core.
		for k := 0; k < 3; k++ {
			full := raw.EncodeToString(append(make([]byte, k), v...))
			from, to := (8*k+5)/6, (8*k+8*len(v))/6
			forms = append(forms, full[from:to])
		}
		slices.Sort(forms)
		for _, f := range slices.Compact(forms) {
			ps = append(ps, base64Pattern(f))
		}
	}
	return ps
}

// textPattern matches v with each character in any of its spellings.
func textPattern(v string) pattern {
	p := make(pattern, 0, len(v))
	for i := 0; i < len(v); {
		r, n := utf8.DecodeRuneInString(v[i:])
		p = append(p, textUnit(r, v[i:i+n]))
		i += n
	}
	return p
}

func textUnit(r rune, raw string) unit {
	var alts []string
	add := func(s ...string) { alts = append(alts, s...) }
	add(raw)
	add(escapeBytes(raw, "%", false), escapeBytes(raw, "%", true))
	add(escapeBytes(raw, `\x`, false), escapeBytes(raw, `\x`, true))
	if r == utf8.RuneError && len(raw) == 1 {
		return toUnit(alts) // a byte that is not UTF-8 has no code point to escape
	}
	for _, f := range caseForms(r)[1:] {
		add(string(f))
	}
	var u16 string
	if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
		u16 = fmt.Sprintf(`\u%04x\u%04x`, r1, r2)
	} else {
		u16 = fmt.Sprintf(`\u%04x`, r)
	}
	add(u16, upperHex(u16))
	for _, e := range []string{fmt.Sprintf(`\U%08x`, r), fmt.Sprintf(`\u{%x}`, r)} { // Go, Python; JavaScript, Rust
		add(e, upperHex(e))
	}
	add(htmlRefs(r)...)
	switch r {
	case ' ':
		add("+")
	case '+':
		add(" ") // a '+' that went through form decoding
	case '/':
		add(`\/`)
	case '"':
		add(`\"`)
	case '\'':
		add(`\'`)
	case '\\':
		add(`\\`)
	case '\t':
		add(`\t`)
	case '\n':
		add(`\n`)
	case '\r':
		add(`\r`)
	case '\b':
		add(`\b`)
	case '\f':
		add(`\f`)
	}
	return toUnit(alts)
}

// maxRefDigits is how many digits, leading zeros included, a numeric character reference
// may have and still be matched. HTML allows any number of leading zeros; a pattern must be
// bounded, and no encoder pads further.
const maxRefDigits = 8

// namedRefs are the HTML named character references of ASCII punctuation (HTML's list; the
// ones a parser also reads without the semicolon are listed without it too). '-' has none of
// its own: &hyphen;, &dash; and &minus; are U+2010 and U+2212, which a reader takes for '-',
// so they are matched as '-' as well.
var namedRefs = map[rune][]string{
	'\t': {"&Tab;"}, '\n': {"&NewLine;"}, '!': {"&excl;"}, '"': {"&quot;", "&QUOT;", "&quot", "&QUOT"},
	'#': {"&num;"}, '$': {"&dollar;"}, '%': {"&percnt;"}, '&': {"&amp;", "&AMP;", "&amp", "&AMP"},
	'\'': {"&apos;"}, '(': {"&lpar;"}, ')': {"&rpar;"}, '*': {"&ast;", "&midast;"}, '+': {"&plus;"},
	',': {"&comma;"}, '-': {"&hyphen;", "&dash;", "&minus;"}, '.': {"&period;"}, '/': {"&sol;"},
	':': {"&colon;"}, ';': {"&semi;"}, '<': {"&lt;", "&LT;", "&lt", "&LT"}, '=': {"&equals;"},
	'>': {"&gt;", "&GT;", "&gt", "&GT"}, '?': {"&quest;"}, '@': {"&commat;"}, '[': {"&lsqb;", "&lbrack;"},
	'\\': {"&bsol;"}, ']': {"&rsqb;", "&rbrack;"}, '^': {"&Hat;"}, '_': {"&lowbar;", "&UnderBar;"},
	'`': {"&grave;", "&DiacriticalGrave;"}, '{': {"&lcub;", "&lbrace;"}, '|': {"&verbar;", "&vert;", "&VerticalLine;"},
	'}': {"&rcub;", "&rbrace;"},
}

// htmlRefs returns the HTML character references of r: decimal and hex (x or X, digits in
// either case), with leading zeros up to maxRefDigits digits, with and without the closing
// semicolon (a parser reads "&#65" as 'A'), and r's named references.
func htmlRefs(r rune) []string {
	var out []string
	pad := func(d string) []string {
		var ds []string
		for z := ""; len(z)+len(d) <= max(maxRefDigits, len(d)); z += "0" {
			ds = append(ds, z+d)
		}
		return ds
	}
	for _, d := range pad(strconv.Itoa(int(r))) {
		out = append(out, "&#"+d+";", "&#"+d)
	}
	for _, h := range []string{fmt.Sprintf("%x", r), fmt.Sprintf("%X", r)} {
		for _, d := range pad(h) {
			for _, x := range []string{"x", "X"} {
				out = append(out, "&#"+x+d+";", "&#"+x+d)
			}
		}
	}
	return append(out, namedRefs[r]...)
}

// hexPattern matches v as hex digits, each in either case.
func hexPattern(v string) pattern {
	const digits = "0123456789abcdef"
	p := make(pattern, 0, 2*len(v))
	for i := 0; i < len(v); i++ {
		for _, d := range []byte{digits[v[i]>>4], digits[v[i]&15]} {
			p = append(p, toUnit([]string{string(d), upperHex(string(d))}))
		}
	}
	return p
}

// utf16Pattern matches v encoded as UTF-16, letters in either case.
func utf16Pattern(v string, bigEndian bool) pattern {
	var p pattern
	put := func(c uint16) string {
		if bigEndian {
			return string([]byte{byte(c >> 8), byte(c)})
		}
		return string([]byte{byte(c), byte(c >> 8)})
	}
	for _, r := range v {
		var alts []string
		for _, r := range caseForms(r) {
			var s string
			for _, c := range utf16.Encode([]rune{r}) {
				s += put(c)
			}
			alts = append(alts, s)
		}
		p = append(p, toUnit(alts))
	}
	return p
}

// caseForms returns r and the other runes it equals under Unicode case folding.
func caseForms(r rune) []rune {
	out := []rune{r}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		out = append(out, f)
	}
	return out
}

// lineBreaks may come before any character of a base64 string but its first: MIME wraps
// at 76 columns, PEM at 64, with CRLF or LF, and the text may be JSON-escaped or in a URL.
var lineBreaks = []string{"\n", "\r\n", `\n`, `\r\n`, "%0a", "%0A", "%0d%0a", "%0D%0A"}

// base64Pattern matches a base64 string exactly, except that '+', '/' and '=' may be
// percent-encoded (base64 in a URL), '/' JSON-escaped, and '+' a space (form decoding), and
// that a line break (lineBreaks) may precede any character but the first, at any column.
func base64Pattern(s string) pattern {
	p := make(pattern, 0, len(s))
	for i := 0; i < len(s); i++ {
		alts := []string{s[i : i+1]}
		switch s[i] {
		case '+':
			alts = append(alts, "%2b", "%2B", " ")
		case '/':
			alts = append(alts, "%2f", "%2F", `\/`)
		case '=':
			alts = append(alts, "%3d", "%3D")
		}
		if i > 0 {
			for _, a := range alts[:len(alts):len(alts)] {
				for _, br := range lineBreaks {
					alts = append(alts, br+a)
				}
			}
		}
		p = append(p, toUnit(alts))
	}
	return p
}

// escapeBytes writes every byte of s as prefix followed by two hex digits.
func escapeBytes(s, prefix string, upper bool) string {
	digits := "0123456789abcdef"
	if upper {
		digits = "0123456789ABCDEF"
	}
	b := make([]byte, 0, len(s)*(len(prefix)+2))
	for i := 0; i < len(s); i++ {
		b = append(b, prefix...)
		b = append(b, digits[s[i]>>4], digits[s[i]&15])
	}
	return string(b)
}

// upperHex upper-cases the hex letters a-f of s (and the 'u' or 'x' of an escape stays).
func upperHex(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'f' && !(i > 0 && b[i-1] == '\\') {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

func toUnit(alts []string) unit {
	slices.Sort(alts)
	alts = slices.Compact(alts)
	u := make(unit, 0, len(alts))
	for _, a := range alts {
		if a != "" {
			u = append(u, []byte(a))
		}
	}
	return u
}
