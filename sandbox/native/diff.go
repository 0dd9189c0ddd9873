package native

import (
	"bytes"
	"fmt"
)

// The patch's text hunks come from an in-process line diff (Myers' O(ND) algorithm) with a
// bounded amount of work: past postRun.DiffSteps, or an edit distance of maxDiffD lines, the
// differing middle of a file becomes one hunk that removes all its old lines and adds all its
// new ones. That patch is as correct for git apply, only larger.

// maxDiffD bounds the edit distance searched; the search keeps O(D²) state.
const maxDiffD = 2000

// contextLines is the unified diff's context, as diff -u and git use.
const contextLines = 3

// splitLines splits data into lines, each with its '\n' (the last one may lack it).
func splitLines(data []byte) [][]byte {
	var lines [][]byte
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			lines = append(lines, data)
			break
		}
		lines = append(lines, data[:i+1])
		data = data[i+1:]
	}
	return lines
}

// An edit is one line of the script: ' ' kept, '-' removed, '+' added; a and b are the
// line's positions in the old and new files (for '+', a is where it goes in the old one).
type edit struct {
	op   byte
	a, b int
}

// lineEdits is the edit script from a to b.
func lineEdits(a, b [][]byte) []edit {
	// Lines as small integers, so that comparing is cheap.
	ids := map[string]int32{}
	id := func(lines [][]byte) []int32 {
		out := make([]int32, len(lines))
		for i, l := range lines {
			v, ok := ids[string(l)]
			if !ok {
				v = int32(len(ids))
				ids[string(l)] = v
			}
			out[i] = v
		}
		return out
	}
	x, y := id(a), id(b)
	pre := 0
	for pre < len(x) && pre < len(y) && x[pre] == y[pre] {
		pre++
	}
	suf := 0
	for suf < len(x)-pre && suf < len(y)-pre && x[len(x)-1-suf] == y[len(y)-1-suf] {
		suf++
	}
	var out []edit
	for i := 0; i < pre; i++ {
		out = append(out, edit{' ', i, i})
	}
	mid, ok := myers(x[pre:len(x)-suf], y[pre:len(y)-suf], postRun.DiffSteps)
	if !ok {
		mid = mid[:0]
		for i := pre; i < len(x)-suf; i++ {
			mid = append(mid, edit{'-', i - pre, 0})
		}
		for j := pre; j < len(y)-suf; j++ {
			mid = append(mid, edit{'+', len(x) - suf - pre, j - pre})
		}
	}
	for _, e := range mid {
		out = append(out, edit{e.op, e.a + pre, e.b + pre})
	}
	for i := 0; i < suf; i++ {
		out = append(out, edit{' ', len(x) - suf + i, len(y) - suf + i})
	}
	return out
}

// myers finds a shortest edit script from a to b, or reports false when it would take more
// than maxDiffD edits or steps of work.
func myers(a, b []int32, steps int) ([]edit, bool) {
	n, m := len(a), len(b)
	if n == 0 || m == 0 {
		var out []edit
		for i := range a {
			out = append(out, edit{'-', i, 0})
		}
		for j := range b {
			out = append(out, edit{'+', n, j})
		}
		return out, true
	}
	dmax := min(n+m, maxDiffD)
	off := dmax + 1
	v := make([]int32, 2*dmax+3)
	// trace[d] holds v[-d+1 .. d-1] as it was before round d, for the way back.
	var trace [][]int32
	for d := 0; d <= dmax; d++ {
		if d == 0 {
			trace = append(trace, nil)
		} else {
			trace = append(trace, append([]int32(nil), v[off-d+1:off+d]...))
		}
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = int(v[off+k+1])
			} else {
				x = int(v[off+k-1]) + 1
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
				steps--
			}
			if steps--; steps < 0 {
				return nil, false
			}
			v[off+k] = int32(x)
			if x >= n && y >= m {
				return backtrack(trace, n, m), true
			}
		}
	}
	return nil, false
}

func backtrack(trace [][]int32, n, m int) []edit {
	var rev []edit
	x, y := n, m
	for d := len(trace) - 1; d >= 0; d-- {
		at := func(k int) int { return int(trace[d][k+d-1]) } // trace[d] starts at k = -d+1
		k := x - y
		var pk int
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := 0
		if d > 0 {
			px = at(pk)
		}
		py := px - pk
		for x > px && y > py {
			x--
			y--
			rev = append(rev, edit{' ', x, y})
		}
		if d > 0 {
			if x == px {
				rev = append(rev, edit{'+', x, py})
			} else {
				rev = append(rev, edit{'-', px, y})
			}
		}
		x, y = px, py
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

// writeHunks writes the unified diff hunks from a to b (after the ---/+++ lines).
func writeHunks(out *bytes.Buffer, a, b [][]byte) {
	edits := lineEdits(a, b)
	for i := 0; i < len(edits); {
		for i < len(edits) && edits[i].op == ' ' {
			i++
		}
		if i == len(edits) {
			return
		}
		start := max(0, i-contextLines)
		last := i
		j := i
		for ; j < len(edits); j++ {
			if edits[j].op != ' ' {
				last = j
			} else if j-last > 2*contextLines {
				break
			}
		}
		end := min(len(edits), last+contextLines+1)
		writeHunk(out, a, b, edits[start:end])
		i = end
	}
}

func writeHunk(out *bytes.Buffer, a, b [][]byte, h []edit) {
	na, nb := 0, 0
	for _, e := range h {
		if e.op != '+' {
			na++
		}
		if e.op != '-' {
			nb++
		}
	}
	// Each edit carries both files' positions, so the first one says where the hunk starts
	// (with no lines on a side, the position names the line before, as diff does).
	fmt.Fprintf(out, "@@ -%s +%s @@\n", hunkRange(h[0].a, na), hunkRange(h[0].b, nb))
	for _, e := range h {
		var line []byte
		if e.op == '+' {
			line = b[e.b]
		} else {
			line = a[e.a]
		}
		out.WriteByte(e.op)
		out.Write(line)
		if len(line) == 0 || line[len(line)-1] != '\n' {
			out.WriteString("\n\\ No newline at end of file\n")
		}
	}
}

func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}
