package jsondoc

import "sync"

// scratch is the member stacks of a parser, reused between parses: allocating them for
// each small document was a quarter of its parse time.
type scratch struct {
	vals []Value
	keys []string
}

// maxScratch bounds the stacks kept for reuse (a document with more open members at once
// gets stacks of its own).
const maxScratch = 256

var scratchPool = sync.Pool{New: func() any {
	return &scratch{vals: make([]Value, 0, 32), keys: make([]string, 0, 32)}
}}

// put returns the stacks to the pool, cleared: a kept Value must not hold on to a document.
func (sc *scratch) put(vals []Value, keys []string) {
	if cap(vals) > maxScratch || cap(keys) > maxScratch {
		return
	}
	clear(vals[:cap(vals)])
	clear(keys[:cap(keys)])
	sc.vals, sc.keys = vals[:0], keys[:0]
	scratchPool.Put(sc)
}
