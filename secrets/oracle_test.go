package secrets

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/textproto"
	"net/url"
	"strings"
	"testing"
)

// encodedForms are the spellings of v whose prefixes a response may end in.
func encodedForms(v string) map[string]string {
	return map[string]string{
		"literal":   v,
		"upper":     strings.ToUpper(v),
		"query":     url.QueryEscape(v),
		"every %XX": pctAll(v, "%%%02X"),
		"html":      pctAll(v, "&#%d;"),
		"hex":       hex.EncodeToString([]byte(v)),
		"base64":    base64.StdEncoding.EncodeToString([]byte(v)),
		"base64url": base64.RawURLEncoding.EncodeToString([]byte(v)),
		"json \\u":  pctAll(v, `\u%04x`),
	}
}

// TestTrailingPrefixPassesUnchanged: a response that ends in a prefix of the value, in any
// spelling and of any length short of the whole, comes out exactly as it went in, however it
// is split into reads, and counts no redaction. Redacting such a prefix would tell the
// sandbox, length by length, which guesses begin the value.
func TestTrailingPrefixPassesUnchanged(t *testing.T) {
	for _, sec := range []string{"sk-live-4f3a9b2c41d8e6", "ghp_0123456789abcdefABCDEF0123456789abcd", "a/b+c=d&e"} {
		s := newScrubber([]Secret{NewSecret(sec)}).forRequest()
		whole := oracle(sec)
		for name, form := range encodedForms(sec) {
			for k := 0; k < len(form); k++ {
				for _, lead := range []string{"", "echo: ", strings.Repeat("z", 700)} {
					in := lead + form[:k]
					if whole.MatchString(in) {
						continue // the prefix already spells the whole value (base64's last character holds no bits of it)
					}
					for _, sizes := range [][]int{nil, {1}, {3, 5}, {1 << 16}} {
						if got := readAll(t, s, in, sizes); got != in {
							t.Fatalf("%s prefix of %d bytes after %d: got %q, want it unchanged", name, k, len(lead), got)
						}
					}
					if got := s.ScrubString(in); got != in {
						t.Fatalf("ScrubString: %s prefix of %d bytes: got %q", name, k, got)
					}
				}
			}
		}
		if n := s.Redactions(); n != 0 {
			t.Errorf("%d redactions counted for prefixes only, want 0", n)
		}
		// The whole value is redacted, and counted.
		if got := readAll(t, s, "x "+sec, []int{2}); got != "x "+R || s.Redactions() != 1 {
			t.Errorf("whole value: got %q and %d redactions, want %q and 1", got, s.Redactions(), "x "+R)
		}
	}
}

// TestHoldBackIsContentIndependent: when each output byte is released depends only on how
// many input bytes arrived, not on what they are: a stream whose tail is a growing prefix
// of the value is released exactly like one of random bytes of the same length.
func TestHoldBackIsContentIndependent(t *testing.T) {
	const sec = "sk-live-4f3a9b2c41d8e6"
	m := compile([]string{sec})
	rng := rand.New(rand.NewPCG(3, 4))
	whole := oracle(sec)
	for _, form := range encodedForms(sec) {
		for k := 1; k < len(form); k++ {
			probe := strings.Repeat("q", rng.IntN(600)) + form[:k]
			if whole.MatchString(probe) {
				continue
			}
			other := string(randBytes(rng, len(probe)))
			if firstSignature([]byte(other)) >= 0 || m.window == 0 {
				continue
			}
			released := func(in string) []int {
				r := newRedactor(m)
				var out []byte
				var lens []int
				for i := 0; i < len(in); {
					n := min(len(in)-i, 1+rng.IntN(9))
					out = r.feed([]byte(in[i:i+n]), out)
					lens = append(lens, len(out))
					i += n
				}
				return append(lens, len(r.finish(out)))
			}
			seed := rng.Uint64()
			rng = rand.New(rand.NewPCG(seed, 1))
			a := released(probe)
			rng = rand.New(rand.NewPCG(seed, 1))
			b := released(other)
			if fmt.Sprint(a) != fmt.Sprint(b) {
				t.Fatalf("prefix of %d: released %v, random bytes %v", k, a, b)
			}
		}
	}
}

// wrapLines breaks s every n characters with sep, as MIME (76, CRLF) and PEM (64, LF) do.
func wrapLines(s string, n int, sep string) string {
	var b strings.Builder
	for i := 0; i < len(s); i += n {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(s[i:min(i+n, len(s))])
	}
	return b.String()
}

// TestLineBrokenBase64: base64 wrapped into lines (MIME at 76 columns with CRLF, PEM at 64
// with LF, any other width, JSON-escaped or URL-encoded line breaks) is matched, the value at
// any offset in the encoded data.
func TestLineBrokenBase64(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	secs := []string{strings.Repeat("sk-live-4f3a9b2c41d8e6/", 6), "ghp_0123456789abcdefABCDEF0123456789abcd"}
	for _, sec := range secs {
		s := newScrubber([]Secret{NewSecret(sec)})
		for pre := range 5 {
			data := append(randBytes(rng, pre*17), sec...)
			data = append(data, randBytes(rng, rng.IntN(30))...)
			std := base64.StdEncoding.EncodeToString(data)
			cases := map[string]string{
				"MIME 76 CRLF": wrapLines(std, 76, "\r\n"),
				"MIME 76 LF":   wrapLines(std, 76, "\n"),
				"PEM":          string(pem.EncodeToMemory(&pem.Block{Type: "TOKEN", Bytes: data})),
				"every 7 CRLF": wrapLines(std, 7, "\r\n"),
				"every 1 LF":   wrapLines(std, 1, "\n"),
				"JSON \\n":     wrapLines(std, 64, `\n`),
				"JSON \\r\\n":  wrapLines(std, 76, `\r\n`),
				"URL %0D%0A":   wrapLines(std, 76, "%0D%0A"),
				"url-safe 64":  wrapLines(base64.RawURLEncoding.EncodeToString(data), 64, "\n"),
			}
			for name, in := range cases {
				out := readAll(t, s, in, []int{1 + rng.IntN(100)})
				if !strings.Contains(out, R) {
					t.Fatalf("%s (%d bytes before): not redacted: %q", name, pre*17, out)
				}
				unwrapped := strings.NewReplacer("\r", "", "\n", "", `\r`, "", `\n`, "", "%0D", "", "%0A", "").Replace(out)
				for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
					for _, piece := range strings.Split(unwrapped, R) {
						if revealsInBase64(piece, sec, enc) {
							t.Fatalf("%s (%d bytes before): %q still decodes to the value", name, pre*17, out)
						}
					}
				}
			}
		}
	}
}

// TestHTMLReferences: every HTML character reference a parser reads as the value's
// characters (decimal and hex with leading zeros, x or X, either digit case, with or without
// the semicolon, named references of punctuation, mixed with literal characters) is matched.
func TestHTMLReferences(t *testing.T) {
	named := map[rune][]string{}
	for r, ns := range namedRefs {
		named[r] = ns
	}
	const sec = "sk-live_4f3a.9b/c:d=e+f@g"
	s := newScrubber([]Secret{NewSecret(sec)})
	rng := rand.New(rand.NewPCG(7, 8))
	spell := func(r rune) string {
		switch rng.IntN(7) {
		case 0:
			return string(r)
		case 1:
			return fmt.Sprintf("&#%0*d;", rng.IntN(8), r)
		case 2:
			return fmt.Sprintf("&#%0*d", rng.IntN(8), r)
		case 3:
			return fmt.Sprintf("&#x%0*x;", rng.IntN(8), r)
		case 4:
			return fmt.Sprintf("&#X%0*X", rng.IntN(8), r)
		case 5:
			if ns := named[r]; len(ns) > 0 {
				return ns[rng.IntN(len(ns))]
			}
			return fmt.Sprintf("&#x%X;", r)
		default:
			return fmt.Sprintf("&#%08d;", r)
		}
	}
	for i := range 400 {
		var b strings.Builder
		for _, r := range sec {
			b.WriteString(spell(r))
		}
		in := "<p>token: " + b.String() + "</p>"
		if out := readAll(t, s, in, []int{1 + i%13}); out != "<p>token: "+R+"</p>" {
			t.Fatalf("%q -> %q", in, out)
		}
	}
	// Each named reference alone, in place of its character.
	for r, ns := range named {
		v := "tok" + string(r) + "en-0123"
		sv := newScrubber([]Secret{NewSecret(v)})
		for _, n := range ns {
			in := "tok" + n + "en" + "&hyphen;0123"
			if out := sv.ScrubString(in); out != R {
				t.Errorf("%q (for %q): got %q", in, v, out)
			}
		}
	}
}

// compressed returns plain compressed in each format the scrubber must not let through,
// as the libraries (or, for formats without a Go writer, the format's own header) write it.
func compressed(t *testing.T, plain []byte) map[string][]byte {
	t.Helper()
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	f, _ := zw.Create("token.txt")
	f.Write(plain)
	zw.Close()
	var gzBest bytes.Buffer
	gw, _ := gzip.NewWriterLevel(&gzBest, gzip.BestCompression)
	gw.Header.Name = "token.txt"
	gw.Write(plain)
	gw.Close()
	return map[string][]byte{
		"gzip":      gz(plain),
		"gzip best": gzBest.Bytes(),
		"zip":       zb.Bytes(),
		"bzip2":     append([]byte("BZh91AY&SY\x12\x34"), plain...),
		"xz":        append([]byte("\xfd7zXZ\x00\x00\x04"), plain...),
		"zstd":      append([]byte("\x28\xb5\x2f\xfd\x24\x10"), plain...),
		"lz4":       append([]byte("\x04\x22\x4d\x18\x64\x40"), plain...),
		"7z":        append([]byte("7z\xbc\xaf\x27\x1c\x00\x04"), plain...),
		"rar":       append([]byte("Rar!\x1a\x07\x01\x00"), plain...),
	}
}

// TestCompressedPayloadAnywhere: a compressed payload that does not start the body (a part
// of a multipart body, an entry of a tar archive, after any prefix, in base64 or hex inside
// JSON) ends the stream with an UninspectableError before its first byte; the bytes before
// it pass, scrubbed.
func TestCompressedPayloadAnywhere(t *testing.T) {
	const sec = "sk-live-4f3a9b2c41d8e6"
	s := newScrubber([]Secret{NewSecret(sec)})
	plain := []byte("you sent Bearer " + sec + "\n")
	for format, payload := range compressed(t, plain) {
		var mp bytes.Buffer
		mw := multipart.NewWriter(&mp)
		pw, _ := mw.CreatePart(textproto.MIMEHeader{"Content-Type": {"text/plain"}})
		pw.Write([]byte("first part " + sec))
		pw, _ = mw.CreatePart(textproto.MIMEHeader{"Content-Type": {"application/octet-stream"}})
		pw.Write(payload)
		mw.Close()
		var tb bytes.Buffer
		tw := tar.NewWriter(&tb)
		tw.WriteHeader(&tar.Header{Name: "a.txt", Mode: 0o600, Size: int64(len(plain))})
		tw.Write(plain)
		tw.WriteHeader(&tar.Header{Name: "b.bin", Mode: 0o600, Size: int64(len(payload))})
		tw.Write(payload)
		tw.Close()
		for name, in := range map[string][]byte{
			"at offset 0":    payload,
			"after a prefix": append([]byte("HEADER "+sec+" "), payload...),
			"multipart part": mp.Bytes(),
			"tar entry":      tb.Bytes(),
			"base64 in JSON": []byte(`{"blob":"` + base64.StdEncoding.EncodeToString(payload) + `"}`),
			"base64url":      []byte("x=" + base64.RawURLEncoding.EncodeToString(payload)),
			"hex":            []byte("dump " + hex.EncodeToString(payload)),
			"HEX":            []byte("dump " + strings.ToUpper(hex.EncodeToString(payload))),
		} {
			for _, sizes := range [][]int{nil, {1}, {7, 300}, {1 << 20}} {
				got, err := readAllErr(s, string(in), sizes)
				var ue *UninspectableError
				if !errors.As(err, &ue) || !strings.Contains(ue.What, format[:2]) {
					t.Fatalf("%s %s: got %v, want an UninspectableError naming %s", format, name, err, format)
				}
				if strings.Contains(got, sec) || len(got) > 0 && !strings.HasPrefix(s.ScrubString(string(in)), got) {
					t.Fatalf("%s %s: passed %q, want a scrubbed prefix of what precedes the payload", format, name, got)
				}
				if bytes.Contains([]byte(got), payload[:4]) {
					t.Fatalf("%s %s: the payload's first bytes were passed on", format, name)
				}
			}
		}
	}
}

// TestNoSignatureFalsePositives: text that holds pieces of signatures, and random binary
// data, passes.
func TestNoSignatureFalsePositives(t *testing.T) {
	s := newScrubber([]Secret{NewSecret("sk-live-4f3a9b2c41d8e6")})
	rng := rand.New(rand.NewPCG(9, 10))
	for _, in := range []string{
		"PK is a primary key; BZh is not bzip2 without its block; H4sI alone is four letters; UEsD",
		"7z archives and Rar! files are named here, LZIP too, and 1f8b is a hex number",
		strings.Repeat("The quick brown fox jumps over the lazy dog. ", 2000),
		string(randBytes(rng, 1<<20)),
	} {
		if firstSignature([]byte(in)) >= 0 {
			t.Fatalf("the test input itself holds a signature")
		}
		if got := readAll(t, s, in, []int{4096}); got != in {
			t.Errorf("%.60q... changed", in)
		}
	}
}

func TestRedactionCount(t *testing.T) {
	const sec = "sk-live-4f3a9b2c41d8e6"
	shared := newScrubber([]Secret{NewSecret(sec)})
	a, b := shared.forRequest(), shared.forRequest()
	if _, err := io.ReadAll(a.Reader(io.NopCloser(strings.NewReader(sec + " and " + base64.StdEncoding.EncodeToString([]byte(sec)))))); err != nil {
		t.Fatal(err)
	}
	a.ScrubString("x" + strings.ToUpper(sec))
	if a.Redactions() != 3 || b.Redactions() != 0 || shared.Redactions() != 0 {
		t.Errorf("redactions: got %d, %d, %d; want 3 for the request that saw three, 0 for the others", a.Redactions(), b.Redactions(), shared.Redactions())
	}
}
