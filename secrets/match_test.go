package secrets

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
)

// scan runs a body redactor of m over in, cut into reads of size n, and returns what it
// emits, the markers written and where the first signature was seen.
func scan(m *matcher, in []byte, n int) ([]byte, int64, int64) {
	r := newRedactor(m)
	r.sigs = true
	var out []byte
	for len(in) > 0 {
		k := min(n, len(in))
		out = r.feed(in[:k], out)
		in = in[k:]
	}
	out = r.finish(out)
	return out, r.markers, r.sigAt
}

// The stride jump (a pair inside the first bytes of every pattern rules out a start before
// it) finds exactly what a scan of every byte finds: the same output, markers and
// signature, for values and signatures at every offset, cut into reads of every size, in
// filler made of the patterns' own bytes so that the jump is often refused.
func TestStrideFindsWhatAByteScanFinds(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, v := range []string{"sk-live-4f3a9b2c41d8e6", "ghp_0123456789abcdefABCDEF0123456789abcd", "a/b+c=d&e", "tok"} {
		fast := compile([]string{v})
		if fast.stride < 2 {
			t.Fatalf("%q: stride %d; want the jump on (patterns of %d+ bytes)", v, fast.stride, 3)
		}
		slow := *fast
		slow.stride = 0
		var pieces [][]byte
		for _, f := range encodedForms(v) {
			pieces = append(pieces, []byte(f), []byte(f[:len(f)/2]))
		}
		for _, s := range signatures() {
			pieces = append(pieces, combos(fixedHead(s.p))...)
		}
		alphabet := bytes.Join(pieces, nil)
		for trial := range 400 {
			var in []byte
			for len(in) < 300 {
				if rnd.IntN(4) == 0 {
					in = append(in, pieces[rnd.IntN(len(pieces))]...)
					continue
				}
				for range rnd.IntN(12) {
					in = append(in, alphabet[rnd.IntN(len(alphabet))])
				}
			}
			for _, n := range []int{1, 2, 3, 5, 8, 64, len(in)} {
				got, gm, gs := scan(fast, in, n)
				want, wm, ws := scan(&slow, in, n)
				if !bytes.Equal(got, want) || gm != wm || gs != ws {
					t.Fatalf("%q trial %d, reads of %d: with the jump %q (%d markers, signature at %d), byte by byte %q (%d, %d)",
						v, trial, n, got, gm, gs, want, wm, ws)
				}
			}
		}
	}
}

// replace without a possible start returns its input untouched (mayStart), exactly as the
// redactor would: strings of the patterns' own bytes, some holding values, some prefixes.
func TestReplaceShortcutAgreesWithTheRedactor(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	for _, v := range []string{"sk-live-4f3a9b2c41d8e6", "a/b+c=d&e", "tok", "x"} {
		m := compile([]string{v})
		var pieces []string
		for _, f := range encodedForms(v) {
			pieces = append(pieces, f, f[:len(f)/2], f[len(f)/2:])
		}
		alphabet := strings.Join(pieces, "") + "abc XYZ-_/:;,.0123456789"
		skipped := 0
		for range 3000 {
			var b strings.Builder
			for b.Len() < rnd.IntN(40) {
				if rnd.IntN(5) == 0 {
					b.WriteString(pieces[rnd.IntN(len(pieces))])
				} else {
					b.WriteByte(alphabet[rnd.IntN(len(alphabet))])
				}
			}
			in := b.String()
			got, gn := m.replace(in)
			r := newRedactor(m)
			want := string(r.finish(r.feed([]byte(in), nil)))
			if got != want || gn != r.markers {
				t.Fatalf("%q: replace(%q) = %q, %d; the redactor gives %q, %d", v, in, got, gn, want, r.markers)
			}
			if in != "" && !m.mayStart(in) {
				skipped++
			}
		}
		if skipped == 0 && len(v) > 1 {
			t.Errorf("%q: no input took the shortcut; the test does not exercise it", v)
		}
	}
}
