package rego

import (
	"crypto/sha256"
	"encoding/binary"
	"slices"
	"strings"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/airlock-proxy/airlock/internal/jsondoc"
)

// maxCached bounds the decision cache; when full it is emptied and refilled.
const maxCached = 4096

// decisionCache remembers decisions of a deterministic policy by the input it saw. It belongs
// to one compiled snapshot, so a reload starts with an empty cache. A policy that reads headers
// (they vary per client), or calls a non-deterministic builtin (time, http.send, random...),
// is not cached.
//
// The key is the SHA-256 of a canonical, length-prefixed encoding of every input field the
// policy can read (the query, body, MCP arguments and id only when the policy refers to them,
// as inputValue builds it): MCP calls that differ only in their JSON-RPC id share an entry
// when the policy never reads the id. The
// encoding is injective: two inputs share a key only if the policy would see the same
// document, or SHA-256 collides. TestCacheKeyCoversEveryInputField fails when a field is
// added to the input document but not to the key.
type decisionCache struct {
	mu sync.RWMutex
	m  map[cacheKey]Decision

	use inputUse // what the key includes besides the fields every input has
}

// cacheKey is the SHA-256 of an input's canonical encoding: fixed-size whatever the input
// holds, and collision resistant against a client that chooses the inputs (unlike a fast
// seeded hash such as maphash, whose 64 bits a client sending many requests could collide).
type cacheKey [sha256.Size]byte

func newDecisionCache(c *ast.Compiler, use inputUse) *decisionCache {
	if use.headers || callsNondeterministic(c) {
		return nil
	}
	return &decisionCache{m: make(map[cacheKey]Decision, 256), use: use}
}

func (dc *decisionCache) get(key cacheKey) (Decision, bool) {
	if dc == nil {
		return Decision{}, false
	}
	dc.mu.RLock()
	d, ok := dc.m[key]
	dc.mu.RUnlock()
	return d, ok
}

func (dc *decisionCache) put(key cacheKey, d Decision) {
	if dc == nil {
		return
	}
	dc.mu.Lock()
	if len(dc.m) >= maxCached {
		clear(dc.m)
	}
	dc.m[key] = d
	dc.mu.Unlock()
}

// key is the cache key of in.
func (dc *decisionCache) key(in *Input) cacheKey {
	var buf [512]byte // most inputs without a body fit: no allocation
	return sha256.Sum256(canonicalInput(buf[:0], in, dc.use))
}

// canonicalInput appends an injective encoding of the input document inputValue builds for
// use: every string is its length then its bytes, every map its size then its entries in
// sorted key order, every list its length then its elements, always in the same field order.
// No byte a string may hold can end it early or pass for a separator, so inputs the policy
// would see differently never encode alike. A field that inputValue leaves out when empty
// (scheme, path, query, headers) encodes as empty, so absent and empty share a key, as they
// share a document.
func canonicalInput(b []byte, in *Input, use inputUse) []byte {
	b = binary.AppendVarint(b, int64(in.Version))
	b = appendString(b, string(in.Phase))
	b = appendString(b, in.Sandbox.ID)
	b = appendLabels(b, in.Sandbox.Labels)
	r := &in.Request
	b = appendString(b, r.Method)
	b = appendString(b, r.Scheme)
	b = appendString(b, r.Host)
	b = binary.AppendVarint(b, int64(r.Port))
	b = appendString(b, r.Path)
	var query, headers map[string][]string
	if use.query {
		query = r.Query
	}
	if use.headers {
		headers = r.Headers
	}
	b = appendQuery(b, query, use.queryKeys)
	b = appendMultiValue(b, headers)
	return appendBodyViews(b, r, use)
}

// appendBodyViews is canonicalInput's encoding of the body and its MCP and GraphQL views.
//
//go:noinline
func appendBodyViews(b []byte, r *RequestInput, use inputUse) []byte {
	// A body-aware request: the body by its exact bytes (they determine the parsed document),
	// each view behind a presence byte, so that absent and empty differ as in the document.
	var body *jsondoc.Value
	if use.body {
		body = r.Body
	}
	b = appendJSON(b, body)
	if m := r.MCP; m == nil {
		b = append(b, 0)
	} else {
		var args, id *jsondoc.Value
		if use.mcpArgs {
			args = m.Arguments
		}
		if use.mcpID {
			id = m.ID
		}
		b = append(b, 1)
		b = appendString(b, m.Method)
		b = appendString(b, m.Tool)
		b = appendJSON(b, args)
		b = appendJSON(b, id)
	}
	if g := r.GraphQL; g == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = appendString(b, string(g.OperationType))
		b = appendString(b, g.OperationName)
		b = binary.AppendUvarint(b, uint64(len(g.RootFields)))
		for _, f := range g.RootFields {
			b = appendString(b, f)
		}
	}
	return b
}

// appendJSON encodes a parsed JSON value by its exact bytes: a document is a function of
// them. nil (and the zero Value, which inputValue leaves out too) encode as empty, which no
// JSON value is.
func appendJSON(b []byte, v *jsondoc.Value) []byte {
	if v == nil || v.Kind == 0 {
		return appendString(b, "")
	}
	return append(binary.AppendUvarint(b, uint64(len(v.Raw))), v.Raw...)
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// appendLabels and appendMultiValue are out of line: inlined, their map iterators would
// sit in canonicalInput's frame, on every request's stack (see Engine.evalQuery).
//
//go:noinline
func appendLabels(b []byte, m map[string]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	for _, k := range sortedKeys(m) {
		b = appendString(appendString(b, k), m[k])
	}
	return b
}

// appendQuery encodes the query as queryTerm builds it: when keys is set, only the
// parameters of keys, as appendMultiValue encodes a map of those alone.
//
//go:noinline
func appendQuery(b []byte, q map[string][]string, keys []string) []byte {
	if keys == nil || len(q) == 0 {
		return appendMultiValue(b, q)
	}
	n := 0
	for _, k := range keys {
		if _, ok := q[k]; ok {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for _, k := range keys { // sorted, as appendMultiValue's keys
		if vs, ok := q[k]; ok {
			b = appendValues(b, k, vs)
		}
	}
	return b
}

func appendMultiValue(b []byte, m map[string][]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	for _, k := range sortedKeys(m) {
		b = appendValues(b, k, m[k])
	}
	return b
}

// appendValues is one entry of a multi-valued map: its key, then its values' count and values.
func appendValues(b []byte, k string, vs []string) []byte {
	b = appendString(b, k)
	b = binary.AppendUvarint(b, uint64(len(vs)))
	for _, v := range vs {
		b = appendString(b, v)
	}
	return b
}

func sortedKeys[V any](m map[string]V) []string {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// callsNondeterministic reports whether any rule calls a builtin whose result may change
// between two evaluations of the same input.
func callsNondeterministic(c *ast.Compiler) bool {
	found := false
	for _, m := range c.Modules {
		ast.WalkExprs(m, func(e *ast.Expr) bool {
			if !e.IsCall() {
				return false
			}
			name := e.Operator().String()
			if bi, ok := ast.BuiltinMap[name]; ok && bi.Nondeterministic {
				found = true
			} else if !ok && !strings.HasPrefix(name, "data.") {
				found = true // unknown to us: be safe
			}
			return found
		})
		if found {
			return true
		}
	}
	return false
}
