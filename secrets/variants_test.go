package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"math/rand/v2"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// encoder is an encoding upstreams commonly apply to what they echo, written independently
// of the scrubber's patterns (standard library where it has one).
type encoder struct {
	name string
	enc  func(string) string
}

var encoders = []encoder{
	{"literal", func(s string) string { return s }},
	{"upper", strings.ToUpper},
	{"lower", strings.ToLower},
	{"swapped case", func(s string) string {
		return strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' {
				return r - 32
			} else if r >= 'A' && r <= 'Z' {
				return r + 32
			}
			return r
		}, s)
	}},
	{"query escape", url.QueryEscape},
	{"query escape, lower hex", func(s string) string { return lowerEscapes(url.QueryEscape(s)) }},
	{"path escape", url.PathEscape},
	{"every byte %XX", func(s string) string { return pctAll(s, "%%%02X") }},
	{"every byte %xx", func(s string) string { return pctAll(s, "%%%02x") }},
	{"every byte \\xhh", func(s string) string { return pctAll(s, `\x%02x`) }},
	{"json", func(s string) string { b, _ := json.Marshal(s); return string(b[1 : len(b)-1]) }},
	{"json, escaped slash", func(s string) string {
		b, _ := json.Marshal(s)
		return strings.ReplaceAll(string(b[1:len(b)-1]), "/", `\/`)
	}},
	{"json ascii (every rune \\uXXXX)", func(s string) string {
		var b strings.Builder
		for _, c := range utf16.Encode([]rune(s)) {
			fmt.Fprintf(&b, `\u%04X`, c)
		}
		return b.String()
	}},
	{"quote to ascii", func(s string) string { q := strconv.QuoteToASCII(s); return q[1 : len(q)-1] }},
	{"html escape", html.EscapeString},
	{"html numeric", func(s string) string {
		var b strings.Builder
		for _, r := range s {
			fmt.Fprintf(&b, "&#%d;", r)
		}
		return b.String()
	}},
	{"hex", func(s string) string { return hex.EncodeToString([]byte(s)) }},
	{"HEX", func(s string) string { return strings.ToUpper(hex.EncodeToString([]byte(s))) }},
	{"base64", func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }},
	{"base64 raw", func(s string) string { return base64.RawStdEncoding.EncodeToString([]byte(s)) }},
	{"base64url", func(s string) string { return base64.URLEncoding.EncodeToString([]byte(s)) }},
	{"base64url raw", func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }},
	{"base64 in a query", func(s string) string { return url.QueryEscape(base64.StdEncoding.EncodeToString([]byte(s))) }},
	{"base64 form-decoded", func(s string) string {
		return strings.ReplaceAll(base64.StdEncoding.EncodeToString([]byte(s)), "+", " ")
	}},
	{"utf-16le", func(s string) string { return utf16Bytes(s, binary.LittleEndian) }},
	{"utf-16be", func(s string) string { return utf16Bytes(s, binary.BigEndian) }},
}

func lowerEscapes(s string) string {
	return regexp.MustCompile(`%[0-9A-F]{2}`).ReplaceAllStringFunc(s, strings.ToLower)
}

func pctAll(s, format string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, format, s[i])
	}
	return b.String()
}

func utf16Bytes(s string, order binary.AppendByteOrder) string {
	var b []byte
	for _, c := range utf16.Encode([]rune(s)) {
		b = order.AppendUint16(b, c)
	}
	return string(b)
}

// testSecrets are values of the shapes credentials take, and awkward ones.
func testSecrets(rng *rand.Rand) []string {
	out := []string{
		"ghp_0123456789abcdefABCDEF0123456789abcd",
		"Bearer sk-live-4f3a9b2c41d8e6",
		"a b/c+d&e\"f<g>h'i\\j=k",
		"pässwörd-€-𝄞-0123",
		"xK9/+==aB",
		"012345",
	}
	const alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/=.~ %&"
	for range 6 {
		b := make([]byte, 6+rng.IntN(40))
		for i := range b {
			b[i] = alpha[rng.IntN(len(alpha))]
		}
		out = append(out, string(b))
	}
	return out
}

// TestVariantsNeverSurvive is the property: for any value, any common encoding of it, any
// text around it and any split of the stream into reads, the scrubbed output holds neither
// the encoded value nor, decoded, the value.
func TestVariantsNeverSurvive(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const around = "abcdefABCDEF0123456789 .,:-_=+/%\\&#x"
	wrap := func() string {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = around[rng.IntN(len(around))]
		}
		return string(b)
	}
	for _, sec := range testSecrets(rng) {
		s := newScrubber([]Secret{NewSecret(sec)})
		for _, e := range encoders {
			encoded := e.enc(sec)
			for i := range 8 {
				in := wrap() + encoded + wrap()
				sizes := []int{1 + rng.IntN(7), 1 + rng.IntN(64)}
				out := readAll(t, s, in, sizes)
				if strings.Contains(out, encoded) || !strings.Contains(out, R) {
					t.Fatalf("%s of %q (case %d): %q -> %q", e.name, sec, i, in, out)
				}
				if out != s.ScrubString(in) {
					t.Fatalf("%s of %q: streamed %q, at once %q", e.name, sec, out, s.ScrubString(in))
				}
			}
		}
		// Inside a longer base64 string the value starts at any offset.
		for k := range 6 {
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawURLEncoding} {
				pre, post := randBytes(rng, k), randBytes(rng, rng.IntN(5))
				in := enc.EncodeToString(append(append(pre, sec...), post...))
				out := readAll(t, s, in, []int{1 + rng.IntN(9)})
				if revealsInBase64(out, sec, enc) {
					t.Fatalf("base64 (%d bytes before) of %q: %q -> %q still decodes to the value", k, sec, in, out)
				}
			}
		}
	}
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.IntN(256))
	}
	return b
}

func readAll(t testing.TB, s *scrubber, in string, sizes []int) string {
	t.Helper()
	out, err := readAllErr(s, in, sizes)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readAllErr(s *scrubber, in string, sizes []int) (string, error) {
	out := bytes.NewBuffer(nil)
	_, err := out.ReadFrom(s.Reader(nopCloser{&chunkReader{src: []byte(in), sizes: sizes}}))
	return out.String(), err
}

// firstSignature is where the earliest signature (signatures) starts in b, or -1: a plain
// scan, to check the automaton against. Every alternative of a signature's units is one byte.
func firstSignature(b []byte) int {
	for i := range b {
		for _, sig := range signatures() {
			j := i
			for _, u := range sig.p {
				if j == len(b) || !slices.ContainsFunc(u, func(a []byte) bool { return a[0] == b[j] }) {
					j = -1
					break
				}
				j++
			}
			if j >= 0 {
				return i
			}
		}
	}
	return -1
}

type nopCloser struct{ *chunkReader }

func (nopCloser) Close() error { return nil }

// revealsInBase64 decodes every run of base64 characters in out, at each of the four
// character offsets, and reports whether any decoding holds sec.
func revealsInBase64(out, sec string, enc *base64.Encoding) bool {
	alphabet := "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	if enc == base64.RawURLEncoding {
		alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	}
	raw := enc.WithPadding(base64.NoPadding)
	for _, run := range strings.FieldsFunc(out, func(r rune) bool { return !strings.ContainsRune(alphabet, r) }) {
		for off := 0; off < 4 && off < len(run); off++ {
			r := run[off:]
			r = r[:len(r)/4*4]
			if b, err := raw.DecodeString(r); err == nil && bytes.Contains(b, []byte(sec)) {
				return true
			}
		}
	}
	return false
}

// oracle is the scrubber's patterns as a regular expression: a different matcher for the
// same language, to check the automaton against (ASCII values only: Go's regexp reads
// UTF-8).
func oracle(vals ...string) *regexp.Regexp {
	var alts []string
	for _, v := range vals {
		for _, p := range patternsFor(v) {
			var b strings.Builder
			for _, u := range p {
				b.WriteString("(?:")
				for i, a := range u {
					if i > 0 {
						b.WriteByte('|')
					}
					b.WriteString(regexp.QuoteMeta(string(a)))
				}
				b.WriteString(")")
			}
			alts = append(alts, b.String())
		}
	}
	return regexp.MustCompile(strings.Join(alts, "|"))
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// FuzzScrub: however the input is split into reads, the output is the same as scrubbing it
// at once; no piece of output between markers matches any pattern of a value; and output
// differs from input only where the input matches.
func FuzzScrub(f *testing.F) {
	f.Add("secret", "cret", "a secret here", []byte{3})
	f.Add("ab", "abab", "aab abab b", []byte{1, 2})
	f.Add("xyzxyz", "zx", "xyzxyxyzxyzxyz", []byte{5})
	f.Add("sk-live-0123", "p/q+r", "x c2stbGl2ZS0wMTIz p%2Fq%2Br SK-LIVE-0123 sk-live-01", []byte{2, 9})
	f.Fuzz(func(t *testing.T, secret, other, body string, sizes []byte) {
		for _, s := range []string{secret, other} {
			if s == "" || !isASCII(s) || strings.ContainsAny(s, "[]:") || len(s) > 64 {
				t.Skip()
			}
		}
		var sz []int
		for _, b := range sizes {
			sz = append(sz, int(b))
		}
		s := newScrubber([]Secret{NewSecret(secret), NewSecret(other)})
		if at := firstSignature([]byte(body)); at >= 0 {
			got, err := readAllErr(s, body, sz)
			var ue *UninspectableError
			if !errors.As(err, &ue) || !strings.HasPrefix(s.ScrubString(body[:at]), got) {
				t.Fatalf("body %q has a signature at %d: got %q, %v; want a scrubbed prefix of what precedes it and an UninspectableError", body, at, got, err)
			}
			return
		}
		got := readAll(t, s, body, sz)
		if once := s.ScrubString(body); got != once {
			t.Fatalf("streamed %q, at once %q", got, once)
		}
		re := oracle(secret, other)
		for _, piece := range strings.Split(got, R) {
			if loc := re.FindStringIndex(piece); loc != nil {
				t.Fatalf("output %q still holds %q", got, piece[loc[0]:loc[1]])
			}
		}
		if re.MatchString(body) {
			if got == body {
				t.Fatalf("body %q matches but was not changed", body)
			}
			return
		}
		if got != body {
			t.Fatalf("body %q holds no value but became %q", body, got)
		}
	})
}
