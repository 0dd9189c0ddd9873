package rego

import (
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
)

// maxCached bounds the decision cache; when full it is emptied and refilled.
const maxCached = 4096

// decisionCache remembers decisions of a deterministic policy by the input fields it can
// read (the query only when the policy reads it). It belongs to one compiled snapshot, so a
// reload starts with an empty cache. A policy that reads headers (they vary per client), or
// calls a non-deterministic builtin (time, http.send, random...), is not cached.
type decisionCache struct {
	mu sync.RWMutex
	m  map[string]Decision

	query bool // the policy reads the query: it is part of the key
}

func newDecisionCache(c *ast.Compiler, use inputUse) *decisionCache {
	if use.headers || callsNondeterministic(c) {
		return nil
	}
	return &decisionCache{m: make(map[string]Decision, 256), query: use.query}
}

func (dc *decisionCache) get(key string) (Decision, bool) {
	if dc == nil {
		return Decision{}, false
	}
	dc.mu.RLock()
	d, ok := dc.m[key]
	dc.mu.RUnlock()
	return d, ok
}

func (dc *decisionCache) put(key string, d Decision) {
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

// key covers every input field a cacheable policy can read.
func (dc *decisionCache) key(in *Input) string {
	var b strings.Builder
	b.Grow(64 + len(in.Request.Host) + len(in.Request.Path))
	b.WriteString(strconv.Itoa(in.Version))
	for _, s := range []string{string(in.Phase), in.Sandbox.ID, in.Request.Method, in.Request.Scheme, in.Request.Host, strconv.Itoa(in.Request.Port), in.Request.Path} {
		b.WriteByte(0)
		b.WriteString(s)
	}
	if len(in.Sandbox.Labels) > 0 {
		keys := make([]string, 0, len(in.Sandbox.Labels))
		for k := range in.Sandbox.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			b.WriteByte(1)
			b.WriteString(k)
			b.WriteByte(2)
			b.WriteString(in.Sandbox.Labels[k])
		}
	}
	if dc.query && len(in.Request.Query) > 0 {
		keys := make([]string, 0, len(in.Request.Query))
		for k := range in.Request.Query {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			b.WriteByte(3)
			b.WriteString(k)
			for _, v := range in.Request.Query[k] {
				b.WriteByte(4)
				b.WriteString(v)
			}
		}
	}
	return b.String()
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
