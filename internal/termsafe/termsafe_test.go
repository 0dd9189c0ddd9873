package termsafe

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// chunks records each write the filter makes.
type chunks struct{ w [][]byte }

func (c *chunks) Write(p []byte) (int, error) {
	c.w = append(c.w, append([]byte(nil), p...))
	return len(p), nil
}

func (c *chunks) all() []byte { return bytes.Join(c.w, nil) }

// filter feeds in in pieces of the given sizes (cycled; 0 means all at once).
func filter(in []byte, sizes ...int) (*chunks, []byte) {
	c := &chunks{}
	f := NewWriter(c)
	for i := 0; len(in) > 0; i++ {
		n := len(in)
		if len(sizes) > 0 && sizes[i%len(sizes)] > 0 {
			n = min(n, sizes[i%len(sizes)])
		}
		f.Write(in[:n])
		in = in[n:]
	}
	f.Close()
	return c, c.all()
}

func TestWriter(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"plain text", "hello\tworld\r\n", "hello\tworld\r\n"},
		{"utf-8 with 0x9d continuation bytes", "\u025d \u201d \U0001F600 é", "\u025d \u201d \U0001F600 é"},
		{"colours and cursor", "\x1b[1;31mred\x1b[0m\x1b[2J\x1b[H\x1b(B\x1b7\x1b8", "\x1b[1;31mred\x1b[0m\x1b[2J\x1b[H\x1b(B\x1b7\x1b8"},
		{"OSC 52 clipboard, BEL", "a\x1b]52;c;ZXZpbA==\x07b", "ab"},
		{"OSC 0 title, ST", "a\x1b]0;airlock: patch OK\x1b\\b", "ab"},
		{"OSC 8 link", "\x1b]8;;http://evil\x1b\\x\x1b]8;;\x1b\\", "x"},
		{"DCS", "a\x1bP+q544e\x1b\\b", "ab"},
		{"APC, PM, SOS", "1\x1b_apc\x1b\\2\x1b^pm\x1b\\3\x1bXsos\x1b\\4", "1234"},
		{"screen title ESC k", "a\x1bktitle\x1b\\b", "ab"},
		{"8-bit OSC and ST", "a\x9d52;c;eA==\x9cb", "ab"},
		{"8-bit OSC ended by BEL", "a\x9d0;t\x07b", "ab"},
		{"UTF-8 encoded OSC and ST", "a\xc2\x9d52;c;eA==\xc2\x9cb", "ab"},
		{"UTF-8 encoded DCS", "a\xc2\x90q\x1b\\b", "ab"},
		{"window report CSI 21 t", "a\x1b[21tb\x1b[8;1;1tc", "abc"},
		{"8-bit CSI kept, window op dropped", "\x9b1m\x9b21t\xc2\x9b2m", "\x9b1m\xc2\x9b2m"},
		{"ESC ESC ] is still an OSC", "a\x1b\x1b]52;c;eA==\x07b", "ab"},
		{"ESC inside OSC starts a new sequence", "a\x1b]0;x\x1b[1mb", "a\x1b[1mb"},
		{"CAN ends a string", "a\x1b]0;x\x18b", "ab"},
		{"other C1 controls dropped", "a\x9ab\xc2\x85c", "abc"},
		{"NUL and invalid bytes pass", "\x00\xff\xfe\xc0\xa0", "\x00\xff\xfe\xc0\xa0"},
		{"lead byte before ESC", "\xc3\x1b]0;x\x07y", "\ufffdy"},
		{"trailing ESC dropped", "a\x1b", "a"},
		{"trailing partial CSI dropped", "a\x1b[12", "a"},
		{"trailing partial UTF-8", "a\xe2\x80", "a\ufffd"},
		{"broken UTF-8", "\xe2\x80a", "\ufffda"},
		{"RIS dropped", "a\x1bcb", "ab"},
		{"erase scrollback dropped, erase screen kept", "a\x1b[3Jb\x1b[2J\x1b[Jc\x9b3Jd\x1b[?3J", "ab\x1b[2J\x1b[Jcd"},
		{"erase scrollback spelled with leading zeros or a sub-parameter dropped", "a\x1b[03Jb\x1b[3:1Jc\x1b[0003;J\x1b[00J", "abc\x1b[00J"},
		{"leaving UTF-8 dropped", "a\x1b%@\xed\x9d\x80]52;c;eA==\x07b\x1b%Gc\x1b%8d", "a\xed\x9d\x80]52;c;eA==\x07bcd"},
		{"charset designations kept", "\x1b(0q\x1b(B\x1b)0", "\x1b(0q\x1b(B\x1b)0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, sizes := range [][]int{{0}, {1}, {2}, {3, 1}} {
				if _, got := filter([]byte(tt.in), sizes...); string(got) != tt.want {
					t.Errorf("pieces %v: %q, want %q", sizes, got, tt.want)
				}
			}
		})
	}
}

// TestUnterminatedString: an OSC that never ends swallows at most maxString bytes.
func TestUnterminatedString(t *testing.T) {
	in := append([]byte("\x1b]52;c;"), bytes.Repeat([]byte("A"), maxString+10)...)
	in = append(in, "visible"...)
	if _, got := filter(in, 4096); !bytes.HasSuffix(got, []byte("visible")) || len(got) > 30 {
		t.Errorf("after an unterminated OSC: %d bytes ending %q", len(got), got[max(0, len(got)-10):])
	}
}

// TestLongCSI: a CSI with endless parameters is dropped, not held without bound.
func TestLongCSI(t *testing.T) {
	in := append([]byte("\x1b["), bytes.Repeat([]byte("1;"), 10000)...)
	in = append(in, "21tok"...)
	c, got := filter(in, 100)
	if string(got) != "ok" {
		t.Errorf("got %q, want ok", got)
	}
	_ = c
}

// checkSafe asserts what no output of the filter may hold: a string introducer (7-bit,
// 8-bit or UTF-8-encoded), a C1 control other than CSI, a CSI ... t, and a write that ends
// inside an escape sequence or a UTF-8 character.
func checkSafe(t *testing.T, c *chunks) {
	t.Helper()
	for _, w := range c.w {
		if len(w) == 0 {
			continue
		}
		for i := 0; i < len(w); {
			b := w[i]
			if b == esc {
				if i+1 == len(w) {
					t.Fatalf("a write ends with ESC: %q", w)
				}
				if stringIntroducer(w[i+1]) {
					t.Fatalf("string introducer ESC %q in %q", w[i+1], w)
				}
			}
			r, n := utf8.DecodeRune(w[i:])
			c1 := -1
			switch {
			case n == 1 && b >= 0x80 && b <= 0x9f:
				c1 = int(b)
			case n == 2 && r >= 0x80 && r <= 0x9f:
				c1 = int(r)
			}
			if c1 >= 0 && c1 != 0x9b {
				t.Fatalf("C1 control %#x in %q", c1, w)
			}
			if b == esc && i+1 < len(w) && (w[i+1] == 'c' || w[i+1] == '%') {
				t.Fatalf("RIS or a coding system switch (ESC %q) in %q", w[i+1], w)
			}
			csiAt := -1
			switch {
			case c1 == 0x9b:
				csiAt = i + n
			case b == esc && i+1 < len(w) && w[i+1] == '[':
				csiAt = i + 2
			}
			if csiAt >= 0 {
				j := csiAt
				for j < len(w) && w[j] >= 0x20 && w[j] <= 0x3f {
					j++
				}
				if j == len(w) {
					t.Fatalf("a write ends inside a CSI: %q", w)
				}
				if w[j] == 't' {
					t.Fatalf("CSI ... t in %q", w)
				}
				if w[j] == 'J' && slices.Contains(strings.Split(strings.TrimLeft(string(w[csiAt:j]), "?<=>"), ";"), "3") {
					t.Fatalf("CSI 3 J in %q", w)
				}
			}
			i += n
		}
		// No write ends inside a UTF-8 character that the next byte could complete.
		for k := 1; k <= 3 && k <= len(w); k++ {
			b := w[len(w)-k]
			if b >= 0xc2 && b <= 0xf4 {
				need := 2
				if b >= 0xe0 {
					need = 3
				}
				if b >= 0xf0 {
					need = 4
				}
				if need > k && allCont(w[len(w)-k+1:]) {
					t.Fatalf("a write ends inside a UTF-8 character: %q", w)
				}
				break
			}
		}
	}
}

func allCont(b []byte) bool {
	for _, c := range b {
		if c < 0x80 || c > 0xbf {
			return false
		}
	}
	return true
}

func FuzzWriter(f *testing.F) {
	for _, s := range []string{"hello", "\x1b]52;c;eA==\x07", "\x1b[1;31mx", "\x9d0;t\x9c", "\xc2\x9d0;t\xc2\x9c",
		"\x1bP1$r\x1b\\", "\x1b\x1b]0;x\x07", "\u025d\x9b21t", "\xc3\x1b]x", "\x1bc", "\x1b[3J", "\x1b[2;3J",
		"\x1b%@\xed\x9d\x80", "\x1b %G", "\x1b[?1049h\x1b[8m"} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, piece uint8) {
		whole, all := filter(in)
		checkSafe(t, whole)
		pieces, split := filter(in, int(piece%17)+1, 1, int(piece%5)+2)
		checkSafe(t, pieces)
		if !bytes.Equal(all, split) {
			t.Fatalf("output depends on how the input is split:\n%q\n%q", all, split)
		}
		// Input with nothing the filter acts on passes unchanged.
		if utf8.Valid(in) && !bytes.ContainsAny(in, "\x1b") && !strings.ContainsFunc(string(in), func(r rune) bool { return r >= 0x80 && r <= 0x9f }) {
			if !bytes.Equal(all, in) {
				t.Fatalf("plain input changed: %q -> %q", in, all)
			}
		}
	})
}

func TestText(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"plain: file.go", "plain: file.go"},
		{"naïve 日本", "naïve 日本"},
		{"dir\x1b]0;x\x07\nairlock: patch OK", `dir\x1b]0;x\x07\nairlock: patch OK`},
		{"\x9d\xc2\x9d\u202eevil", `\x9d\x9d\u202eevil`},
		{"tab\there\r", `tab\there\r`},
		{"\ufffd ok", "\ufffd ok"},
	} {
		if got := Text(tt.in); got != tt.want {
			t.Errorf("Text(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestRestore: what airlock writes before its own lines undoes what hid them in the
// finding (concealed text, the alternate screen, another character set, a hidden cursor),
// and leaves the alternate screen only when the output entered it, as it entered it.
func TestRestore(t *testing.T) {
	for _, tt := range []struct{ name, out, alt string }{
		{"nothing", "hello\n", ""},
		{"concealed, cleared, line drawing", "\x1b[8m\x1b[2J\x1b(0\x0e\x1b[?25l", ""},
		{"alternate screen 1049", "\x1b[?1049h\x1b[8m", "\x1b[?1049l"},
		{"alternate screen 47, among other modes", "\x1b[?1;47;25h", "\x1b[?47l"},
		{"entered and left", "\x1b[?1049hx\x1b[?1049l", ""},
		{"alternate screen spelled with leading zeros", "\x1b[?01049h", "\x1b[?1049l"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWriter(&chunks{})
			w.Write([]byte(tt.out))
			w.Close()
			got := string(Restore(w, nil))
			if !strings.HasPrefix(got, "\x1b[0m") || !strings.Contains(got, "\x1b(B\x0f") || !strings.Contains(got, "\x1b[?25h") {
				t.Errorf("Restore %q: want SGR 0, G0 ASCII and SI, the cursor shown", got)
			}
			if alt := strings.TrimPrefix(got, restoreBase); alt != tt.alt {
				t.Errorf("after %q: leaves the alternate screen with %q, want %q", tt.out, alt, tt.alt)
			}
		})
	}
}

// TestJSONEscapesHiddenCharacters: JSON turns every character that does not show as itself
// into a JSON escape (a surrogate pair beyond U+FFFF), leaves everything else byte for byte,
// and the result parses to the same value.
func TestJSONEscapesHiddenCharacters(t *testing.T) {
	in := map[string]string{"url": "https://x.example/\u202Etxt.exe", "h": "a\u200Bb\u2066c\u2069\u00A0\u3164", "tag": "\U000E0041", "ok": "café 日本 ✓ \uFFFD"}
	b, err := json.MarshalIndent(in, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	out := JSON(b)
	for _, r := range []rune{0x202E, 0x200B, 0x2066, 0x2069, 0x00A0, 0x3164, 0xE0041} {
		if strings.ContainsRune(string(out), r) {
			t.Errorf("U+%04X passed through: %s", r, out)
		}
	}
	for _, want := range []string{`\u202e`, `\u200b`, `\udb40\udc41`, "café 日本 ✓ \uFFFD", "\n  "} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q: %s", want, out)
		}
	}
	var back map[string]string
	if err := json.Unmarshal(out, &back); err != nil || !maps.Equal(back, in) {
		t.Errorf("parses to %q, %v; want %q", back, err, in)
	}
	if plain := []byte(`{"a": "b"}`); &JSON(plain)[0] != &plain[0] {
		t.Error("clean input was copied")
	}
}
