package native

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// applyHunks applies writeHunks' output to a, checking every context and removed line: a
// strict reader of the unified format, for the property tests (the git apply tests check the
// format against git itself).
func applyHunks(t testing.TB, a []byte, hunks string) []byte {
	t.Helper()
	old := splitLines(a)
	var out [][]byte
	pos := 0
	lines := strings.SplitAfter(hunks, "\n")
	for i := 0; i < len(lines) && lines[i] != ""; {
		h := lines[i]
		var as, bs string
		if _, err := fmt.Sscanf(h, "@@ -%s +%s @@\n", &as, &bs); err != nil {
			t.Fatalf("bad hunk header %q", h)
		}
		start, n := parseRange(t, as)
		if n > 0 {
			start--
		}
		if start < pos {
			t.Fatalf("hunk %q goes back to line %d from %d", h, start, pos)
		}
		out = append(out, old[pos:start]...)
		pos = start
		i++
		for i < len(lines) && lines[i] != "" && lines[i][0] != '@' {
			l := lines[i]
			body := []byte(l[1:])
			if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "\\ No newline") {
				body = body[:len(body)-1]
				i++
			}
			switch l[0] {
			case ' ', '-':
				if pos >= len(old) || !bytes.Equal(old[pos], body) {
					t.Fatalf("line %d: want %q, have %q", pos, body, old[min(pos, len(old)-1)])
				}
				if l[0] == ' ' {
					out = append(out, body)
				}
				pos++
			case '+':
				out = append(out, body)
			default:
				t.Fatalf("bad hunk line %q", l)
			}
			i++
		}
		_ = n
	}
	out = append(out, old[pos:]...)
	return bytes.Join(out, nil)
}

func parseRange(t testing.TB, s string) (int, int) {
	start, count, ok := strings.Cut(s, ",")
	a, err := strconv.Atoi(start)
	if err != nil {
		t.Fatalf("bad range %q", s)
	}
	if !ok {
		return a, 1
	}
	n, err := strconv.Atoi(count)
	if err != nil {
		t.Fatalf("bad range %q", s)
	}
	return a, n
}

func hunksOf(a, b []byte) string {
	var out bytes.Buffer
	writeHunks(&out, splitLines(a), splitLines(b))
	return out.String()
}

func randomText(r *rand.Rand, n int) []byte {
	var b []byte
	for range n {
		b = append(b, "abcde"[r.IntN(5)])
		if r.IntN(3) > 0 {
			b = append(b, '\n')
		}
	}
	return b
}

func TestLineDiffRoundTrip(t *testing.T) {
	defer func(l PostRunLimits) { postRun = l }(postRun)
	r := rand.New(rand.NewPCG(1, 2))
	for _, steps := range []int{DefaultPostRunLimits.DiffSteps, 5} {
		postRun.DiffSteps = steps
		for i := 0; i < 2000; i++ {
			a, b := randomText(r, r.IntN(40)), randomText(r, r.IntN(40))
			if got := applyHunks(t, a, hunksOf(a, b)); !bytes.Equal(got, b) {
				t.Fatalf("steps %d: %q -> %q: applying\n%s\ngives %q", steps, a, b, hunksOf(a, b), got)
			}
		}
	}
}

// TestLineDiffIsSmall: a one-line change in a long file is one small hunk, and a file that
// differs everywhere past the work bound is still a correct (whole) hunk.
func TestLineDiffIsSmall(t *testing.T) {
	var a, b strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&a, "line %d\n", i)
		if i == 5000 {
			b.WriteString("changed\n")
		} else {
			fmt.Fprintf(&b, "line %d\n", i)
		}
	}
	h := hunksOf([]byte(a.String()), []byte(b.String()))
	if h != "@@ -4998,7 +4998,7 @@\n line 4997\n line 4998\n line 4999\n-line 5000\n+changed\n line 5001\n line 5002\n line 5003\n" {
		t.Errorf("hunks:\n%s", h)
	}
}

func FuzzLineDiff(f *testing.F) {
	f.Add([]byte("a\nb\nc"), []byte("a\nc\nd\n"), uint16(100))
	f.Add([]byte(""), []byte("x"), uint16(0))
	f.Fuzz(func(t *testing.T, a, b []byte, steps uint16) {
		defer func(l PostRunLimits) { postRun = l }(postRun)
		postRun.DiffSteps = int(steps)
		if got := applyHunks(t, a, hunksOf(a, b)); !bytes.Equal(got, b) {
			t.Fatalf("%q -> %q: applying\n%s\ngives %q", a, b, hunksOf(a, b), got)
		}
	})
}
