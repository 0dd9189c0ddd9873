package secrets

// matcher finds every pattern of a set of values in one pass over a stream. It is a
// nondeterministic automaton over bytes: each unit of a pattern is a small trie of its
// spellings ending in the next unit's first node, and a scan follows every partial match
// (a thread) at once, keeping for each node only the thread that started earliest. The
// secrets are in its edges: it must never be printed (scrubber.Format hides it).
type matcher struct {
	off    []int32 // the edges of node i are eb[off[i]:off[i+1]] (labels) and eto[...] (targets)
	eb     []byte
	eto    []int32
	accept []int32         // a node that completes a pattern: acceptValue, or 1+i for signatures[i]
	root   [256][]int32    // the nodes a match starting with byte c reaches
	starts [256]bool       // whether any pattern starts with byte c
	pairs  [1 << 10]uint64 // bit c1<<8|c2: whether any pattern starts with bytes c1 c2
	short  bool            // some pattern is one byte long: pairs cannot rule out a start
	window int             // longest pattern in bytes: no partial match is ever longer
	// stride and inner let a scan with no match in progress jump: every pattern is at
	// least stride+1 bytes long, and inner has bit c1<<8|c2 for every two bytes that
	// follow each other within the first stride+1 bytes of some spelling of a pattern. A
	// pair at offset j not in inner rules out a match starting anywhere in j-stride+1..j.
	// stride is 0 when patterns are too short for it to pay.
	stride int
	inner  [1 << 10]uint64
}

func (m *matcher) pair(c1, c2 byte) bool {
	i := uint(c1)<<8 | uint(c2)
	return m.pairs[i>>6]&(1<<(i&63)) != 0
}

func (m *matcher) innerPair(c1, c2 byte) bool {
	i := uint(c1)<<8 | uint(c2)
	return m.inner[i>>6]&(1<<(i&63)) != 0
}

// maxStride bounds the jump: a longer one makes inner admit more pairs (every pair of the
// first maxStride+1 bytes of every pattern), so that clean text stops being skipped.
const maxStride = 7

// setStride sets stride and inner for patterns at least minLen bytes long (see matcher).
func (m *matcher) setStride(nodes [][]edge, minLen int) {
	stride := min(minLen, maxStride+1) - 1
	if stride < 2 {
		return
	}
	m.stride = stride
	// Every path from the root is the beginning of some spelling of a pattern: the pairs
	// of labels of consecutive edges at depths d, d+1 with d+1 <= stride.
	level := []int32{0}
	for d := 0; d < stride; d++ {
		seen := map[int32]bool{}
		var next []int32
		for _, x := range level {
			for _, e1 := range nodes[x] {
				for _, e2 := range nodes[e1.to] {
					i := uint(e1.b)<<8 | uint(e2.b)
					m.inner[i>>6] |= 1 << (i & 63)
				}
				if !seen[e1.to] {
					seen[e1.to] = true
					next = append(next, e1.to)
				}
			}
		}
		level = next
	}
}

type edge struct {
	b  byte
	to int32
}

// acceptValue marks a node that completes a value's pattern.
const acceptValue = -1

// compile builds the matcher for the values' patterns (see patternsFor), or nil when there
// is none. It also finds the signatures of compressed formats (signaturePatterns), which
// are reported, not redacted.
func compile(vals []string) *matcher {
	var nodes [][]edge
	newNode := func() int32 { nodes = append(nodes, nil); return int32(len(nodes) - 1) }
	addEdge := func(from int32, b byte, to int32) {
		for _, e := range nodes[from] {
			if e.b == b && e.to == to {
				return
			}
		}
		nodes[from] = append(nodes[from], edge{b, to})
	}
	newNode() // 0: the root, where every match starts
	type acc struct{ node, kind int32 }
	var accept []acc
	window := 0
	type kp struct {
		p    pattern
		kind int32
	}
	var all []kp
	for _, v := range vals {
		for _, p := range patternsFor(v) {
			all = append(all, kp{p, acceptValue})
		}
	}
	if len(all) == 0 {
		return nil
	}
	for i, p := range signaturePatterns() {
		all = append(all, kp{p, int32(i) + 1})
	}
	minLen := -1
	for _, pk := range all {
		p := pk.p
		cur, longest, shortest := int32(0), 0, 0
		for _, u := range p {
			end := newNode()
			type key struct {
				from int32
				b    byte
			}
			inner := map[key]int32{} // this unit's trie: spellings share their prefixes
			ulong, ushort := 0, -1
			for _, alt := range u {
				ulong = max(ulong, len(alt))
				if ushort < 0 || len(alt) < ushort {
					ushort = len(alt)
				}
				x := cur
				for j, b := range alt {
					if j == len(alt)-1 {
						addEdge(x, b, end)
						break
					}
					y, ok := inner[key{x, b}]
					if !ok {
						y = newNode()
						inner[key{x, b}] = y
						addEdge(x, b, y)
					}
					x = y
				}
			}
			longest += ulong
			shortest += max(ushort, 0)
			cur = end
		}
		if len(p) > 0 {
			accept = append(accept, acc{cur, pk.kind})
			window = max(window, longest)
			if minLen < 0 || shortest < minLen {
				minLen = shortest
			}
		}
	}
	m := &matcher{accept: make([]int32, len(nodes)), window: window, off: make([]int32, len(nodes)+1)}
	for _, a := range accept {
		m.accept[a.node] = a.kind
	}
	for _, e := range nodes[0] {
		m.root[e.b] = append(m.root[e.b], e.to)
		m.starts[e.b] = true
		m.short = m.short || m.accept[e.to] != 0
		for _, e2 := range nodes[e.to] {
			i := uint(e.b)<<8 | uint(e2.b)
			m.pairs[i>>6] |= 1 << (i & 63)
		}
	}
	if !m.short {
		m.setStride(nodes, minLen)
	}
	n := 0
	for i, es := range nodes {
		m.off[i] = int32(n)
		if i > 0 {
			n += len(es)
		}
	}
	m.off[len(nodes)] = int32(n)
	m.eb, m.eto = make([]byte, 0, n), make([]int32, 0, n)
	for i, es := range nodes {
		if i == 0 {
			continue
		}
		for _, e := range es {
			m.eb = append(m.eb, e.b)
			m.eto = append(m.eto, e.to)
		}
	}
	return m
}

type thread struct {
	node  int32
	start int64 // stream offset of the match's first byte
}

type span struct{ from, to int64 }

// redactor runs a matcher over a stream and replaces every whole match with Redaction.
// Matches may overlap (an echoed value inside its own base64 form, a value that ends as it
// starts): the union of their bytes is replaced, with one marker for each run.
//
// What it reveals about the secret is only whether a whole match occurred: it always holds
// back exactly the last window-1 bytes of its input (all of them at the end of the stream),
// whatever they are, so how the output is cut into reads does not depend on whether the
// tail looks like the beginning of a value; and at the end of the stream a match in progress
// (a prefix of a value) is passed on unchanged, not redacted. A stream that ends in a prefix
// of the value therefore comes out exactly as it went in, for every length of that prefix.
type redactor struct {
	m        *matcher
	threads  []thread
	next     []thread
	pos      int64    // stream offset of the next input byte
	base     int64    // stream offset of pending[0]
	pending  []byte   // input not yet emitted
	marks    []span   // spans to redact not yet emitted: sorted, disjoint, not adjacent
	markedTo int64    // where the last emitted marker ended
	slot     []int32  // with gen: the index in next of each node's thread, once there are many
	gen      []uint64 // the step at which slot was set
	g        uint64   // the current step
	indexed  bool     // slot covers next in this step
	markers  int64    // Redaction markers emitted
	sigs     bool     // whether to look for signatures (a body, not a header)
	sigAt    int64    // stream offset of the first signature found, or -1
	sigName  string   // what that signature is
}

func newRedactor(m *matcher) redactor { return redactor{m: m, markedTo: -1, sigAt: -1} }

// feed consumes p and appends to out what can no longer be part of a match.
func (r *redactor) feed(p []byte, out []byte) []byte {
	r.pending = append(r.pending, p...)
	m := r.m
	for i := 0; i < len(p); i++ {
		if len(r.threads) == 0 {
			// Nothing in progress: skip to the next byte pair some pattern starts with,
			// jumping stride bytes at a time while a pair inside rules out every start
			// before it.
			for !m.short {
				if s := m.stride; s > 0 {
					for i+s < len(p) && !m.innerPair(p[i+s-1], p[i+s]) {
						i += s
					}
				}
				lim := len(p) - 1
				if m.stride > 0 {
					lim = min(lim, i+m.stride)
				}
				for i < lim && !m.pair(p[i], p[i+1]) {
					i++
				}
				if i < lim || lim == len(p)-1 {
					break // a start, or the end
				}
			}
			for i < len(p) && !m.starts[p[i]] {
				i++
			}
			if i == len(p) {
				break
			}
		}
		c, at := p[i], r.pos+int64(i)
		next := r.next[:0]
		r.g++
		r.indexed = false
		for _, t := range r.threads {
			for e := m.off[t.node]; e < m.off[t.node+1]; e++ {
				if m.eb[e] == c {
					next = r.advance(next, m.eto[e], t.start, at)
				}
			}
		}
		for _, to := range m.root[c] {
			next = r.advance(next, to, at, at)
		}
		r.threads, r.next = next, r.threads
	}
	r.pos += int64(len(p))
	return r.emit(out, false)
}

// finish ends the stream: the bytes held back are emitted, and a match in progress (a
// prefix of a value, never a whole one) is left as it is.
func (r *redactor) finish(out []byte) []byte {
	r.threads = r.threads[:0]
	return r.emit(out, true)
}

// advance moves a thread to node to, after the byte at offset at.
func (r *redactor) advance(next []thread, to int32, start, at int64) []thread {
	if k := r.m.accept[to]; k != 0 {
		if k == acceptValue {
			r.mark(start, at+1)
		} else if r.sigs && r.sigAt < 0 {
			r.sigAt, r.sigName = start, signatures()[k-1].name
		}
		if r.m.off[to] == r.m.off[to+1] {
			return next
		}
	}
	// Keep one thread per node, the earliest: a later one can only match inside its span.
	if !r.indexed && len(next) < 16 {
		for i := range next {
			if next[i].node == to {
				next[i].start = min(next[i].start, start)
				return next
			}
		}
		return append(next, thread{to, start})
	}
	if !r.indexed { // many threads (a value that repeats itself): index them by node
		if r.slot == nil {
			r.slot = make([]int32, len(r.m.accept))
			r.gen = make([]uint64, len(r.m.accept))
		}
		for i := range next {
			r.slot[next[i].node], r.gen[next[i].node] = int32(i), r.g
		}
		r.indexed = true
	}
	if r.gen[to] == r.g {
		i := r.slot[to]
		next[i].start = min(next[i].start, start)
		return next
	}
	r.slot[to], r.gen[to] = int32(len(next)), r.g
	return append(next, thread{to, start})
}

// mark records [from, to) for redaction. to is at or after every recorded end, so the spans
// it touches are the last ones.
func (r *redactor) mark(from, to int64) {
	for len(r.marks) > 0 && r.marks[len(r.marks)-1].to >= from {
		from = min(from, r.marks[len(r.marks)-1].from)
		r.marks = r.marks[:len(r.marks)-1]
	}
	r.marks = append(r.marks, span{from, to})
}

// emit appends the input but for its last window-1 bytes (all of it when final), with marked
// spans replaced by Redaction. No match in progress is longer than window-1 bytes, so none
// starts before that point; a marked span cut by it is finished later without a second
// marker.
func (r *redactor) emit(out []byte, final bool) []byte {
	until := r.pos
	if !final {
		until = max(r.base, r.pos-int64(r.m.window-1))
	}
	if r.sigAt >= 0 {
		until = max(r.base, min(until, r.sigAt)) // nothing from a signature on
	}
	cur := r.base
	for len(r.marks) > 0 && r.marks[0].from < until {
		sp := r.marks[0]
		out = append(out, r.pending[cur-r.base:sp.from-r.base]...)
		if !(cur == sp.from && r.markedTo == sp.from) {
			out = append(out, Redaction...)
			r.markers++
		}
		end := min(sp.to, until)
		r.markedTo, cur = end, end
		if end < sp.to {
			r.marks[0].from = end
			break
		}
		r.marks = r.marks[1:]
	}
	if cur < until {
		out = append(out, r.pending[cur-r.base:until-r.base]...)
	}
	n := copy(r.pending, r.pending[until-r.base:])
	r.pending = r.pending[:n]
	r.base = until
	if len(r.marks) == 0 {
		r.marks = r.marks[:0:0]
	}
	return out
}

// mayStart reports whether a match could start anywhere in s: every pattern is two bytes
// or more (unless short) and starts with a pair in pairs. When none does, replace has
// nothing to do and returns s as it is, which is what the redactor would return (it passes
// a trailing prefix unchanged), without building one: most header values.
func (m *matcher) mayStart(s string) bool {
	if m.short {
		return true
	}
	for i := 0; i+1 < len(s); i++ {
		if m.pair(s[i], s[i+1]) {
			return true
		}
	}
	return false
}

// replace returns s with every match redacted, and how many markers it wrote.
func (m *matcher) replace(s string) (string, int64) {
	if m == nil || s == "" || !m.mayStart(s) {
		return s, 0
	}
	r := newRedactor(m)
	out := r.feed([]byte(s), nil)
	out = r.finish(out)
	return string(out), r.markers
}
