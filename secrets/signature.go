package secrets

import (
	"bytes"
	"encoding/base64"
	"slices"
	"sync"
)

// A compressed or archived payload hides an echoed value from the matcher: its bytes are
// not the value in any spelling. The scrubber therefore refuses, on a destination that may
// reflect, any body in which such a payload begins, wherever it begins (a part of a
// multipart body, an entry of a tar archive, after any prefix):
//
//   - at offset 0, by media type (compressedTypes) or by the first bytes (headSignatures);
//   - at any offset, by the signatures below, matched by the same automaton as the values,
//     as raw bytes and as base64 (standard and URL-safe, the payload at the start of its
//     own base64 string) and hex. The stream is cut before the signature's first byte.
//
// Only formats whose header is long and specific enough not to turn up by chance in other
// data are looked for anywhere; see docs/threat-model.md for what is not caught.

// signature is a format's header as a pattern: each unit is the bytes one position may hold.
type signature struct {
	name string
	p    pattern
}

// signatures are matched anywhere in a body (patterns built by signaturePatterns). They
// are built on first use, not at package init (4 ms and 195 KB at the start of every
// airlock process, most of which never scrub a body).
var signatures = sync.OnceValue(buildSignatures)

func bytesUnit(bs ...byte) unit {
	u := make(unit, 0, len(bs))
	for _, b := range bs {
		u = append(u, []byte{b})
	}
	return u
}

func exactUnits(s string) pattern {
	p := make(pattern, 0, len(s))
	for i := 0; i < len(s); i++ {
		p = append(p, bytesUnit(s[i]))
	}
	return p
}

func byteRange(lo, hi int) []byte {
	var bs []byte
	for b := lo; b <= hi; b++ {
		bs = append(bs, byte(b))
	}
	return bs
}

// rawSignatures are the headers themselves. Each is at least four fixed bytes, or three and
// constrained fields, so that it turns up by chance at most about once in 2^30 bytes of
// random data.
func rawSignatures() []signature {
	gzip := exactUnits("\x1f\x8b\x08")                    // deflate, the only method in use
	gzip = append(gzip, bytesUnit(byteRange(0, 0x1f)...)) // FLG: reserved bits clear
	for range 4 {
		gzip = append(gzip, bytesUnit(byteRange(0, 255)...)) // MTIME
	}
	gzip = append(gzip, bytesUnit(byteRange(0, 255)...))             // XFL
	gzip = append(gzip, bytesUnit(append(byteRange(0, 13), 255)...)) // OS
	bzip2 := exactUnits("BZh")
	bzip2 = append(bzip2, bytesUnit(byteRange('1', '9')...))
	bzip2 = append(bzip2, exactUnits("1AY&SY")...) // the first block's magic (pi)
	return []signature{
		{"gzip", gzip},
		{"zip", exactUnits("PK\x03\x04")},
		{"bzip2", bzip2},
		{"xz", exactUnits("\xfd7zXZ\x00")},
		{"zstd", exactUnits("\x28\xb5\x2f\xfd")},
		{"lz4", exactUnits("\x04\x22\x4d\x18")},
		{"7z", exactUnits("7z\xbc\xaf\x27\x1c")},
		{"rar", exactUnits("Rar!\x1a\x07")},
		{"lzip", exactUnits("LZIP\x01")},
	}
}

func buildSignatures() []signature {
	var out []signature
	for _, s := range rawSignatures() {
		out = append(out, s)
		head := fixedHead(s.p)
		out = append(out, signature{s.name + " data in hex", hexUnits(head)})
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			if p := base64Units(head, enc); len(p) >= 5 {
				out = append(out, signature{s.name + " data in base64", p})
			}
		}
	}
	return out
}

// fixedHead is the leading units of p with few enough spellings to enumerate (at most 64
// combinations in all): what base64 and hex forms are built from.
func fixedHead(p pattern) pattern {
	n := 1
	for i, u := range p {
		if n*len(u) > 64 {
			return p[:i]
		}
		n *= len(u)
	}
	return p
}

// combos lists every byte string p matches (p from fixedHead).
func combos(p pattern) [][]byte {
	out := [][]byte{nil}
	for _, u := range p {
		var next [][]byte
		for _, prefix := range out {
			for _, alt := range u {
				next = append(next, append(slices.Clip(prefix), alt...))
			}
		}
		out = next
	}
	return out
}

// hexUnits spells each byte of p as two hex digits, each in either case.
func hexUnits(p pattern) pattern {
	const digits = "0123456789abcdef"
	var out pattern
	for _, u := range p {
		var hi, lo []string
		for _, alt := range u {
			hi = append(hi, string(digits[alt[0]>>4]), upperHex(string(digits[alt[0]>>4])))
			lo = append(lo, string(digits[alt[0]&15]), upperHex(string(digits[alt[0]&15])))
		}
		// One unit per digit: the pair of digits of one byte is over-approximated as any
		// of its high digits followed by any of its low digits.
		out = append(out, toUnit(hi), toUnit(lo))
	}
	return out
}

// base64Units is the pattern of the characters of p's base64 encoding that p's bits alone
// decide, p at the start of its base64 string: at each position, any character one of
// p's byte strings gives there.
func base64Units(p pattern, enc *base64.Encoding) pattern {
	cs := combos(p)
	if len(cs) == 0 || len(cs[0]) == 0 {
		return nil
	}
	n := len(cs[0]) * 8 / 6
	out := make(pattern, n)
	for i := range out {
		var alts []string
		for _, c := range cs {
			alts = append(alts, enc.EncodeToString(c)[i:i+1])
		}
		out[i] = toUnit(alts)
	}
	return out
}

// signaturePatterns are the patterns of signatures, in order.
func signaturePatterns() []pattern {
	sigs := signatures()
	ps := make([]pattern, len(sigs))
	for i, s := range sigs {
		ps[i] = s.p
	}
	return ps
}

// headSignatures are matched at the start of a body only: formats that are compressed
// themselves or carry deflate or brotli streams inside (PNG, PDF, WOFF), and signatures too
// short or too common to look for anywhere.
var headSignatures = []struct {
	name  string
	magic []byte
}{
	{"gzip", []byte{0x1f, 0x8b}},
	{"compress", []byte{0x1f, 0x9d}},
	{"zip", []byte("PK\x03\x04")},
	{"zip", []byte("PK\x05\x06")},
	{"zip", []byte("PK\x07\x08")},
	{"bzip2", []byte("BZh")},
	{"xz", []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}},
	{"lzma", []byte{0x5d, 0x00, 0x00}},
	{"lzip", []byte("LZIP")},
	{"zstd", []byte{0x28, 0xb5, 0x2f, 0xfd}},
	{"lz4", []byte{0x04, 0x22, 0x4d, 0x18}},
	{"7z", []byte{'7', 'z', 0xbc, 0xaf, 0x27, 0x1c}},
	{"rar", []byte("Rar!\x1a\x07")},
	{"PNG (deflate inside)", []byte("\x89PNG\r\n\x1a\n")},
	{"PDF (deflate streams inside)", []byte("%PDF-")},
	{"WOFF (deflate inside)", []byte("wOFF")},
	{"WOFF2 (brotli inside)", []byte("wOF2")},
}

// headPayload names the format whose signature begins head, or "".
func headPayload(head []byte) string {
	for _, sig := range headSignatures {
		if bytes.HasPrefix(head, sig.magic) {
			return sig.name
		}
	}
	if len(head) >= 2 && head[0] == 0x78 && (uint16(head[0])<<8|uint16(head[1]))%31 == 0 && head[1]&0x20 == 0 {
		return "zlib"
	}
	return ""
}
