package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/airlock-proxy/airlock/internal/redact"
)

// DecisionLog writes decisions in OPA's decision-log format, one JSON object per line, so
// that existing OPA tooling can read them. It is not hash-chained: the audit Sink is the
// evidence; this is a feed.
type DecisionLog struct {
	mu     sync.Mutex
	f      *os.File
	labels map[string]string
}

// Decision is one policy evaluation. Input and Result are anything that marshals to JSON
// (the proxy passes its rego.Input and rego.Decision).
type Decision struct {
	DecisionID string // empty: a random id
	Path       string // the query path; empty: "airlock/decision"
	Input      any
	Result     any
	// Bundles maps bundle name to revision (the policy revision for a directory policy).
	Bundles   map[string]string
	Timestamp time.Time // zero: now
}

// maskedPaths are replaced by "[redacted]" values in every logged input: header and query
// values may carry secrets a sandbox sent. OPA's "masked" field lists them.
var maskedPaths = []string{"/input/request/headers", "/input/request/query"}

// OpenDecisionLog opens (appending) or creates the file at path. labels become the
// entry's "labels" (OPA puts the instance id and version there).
func OpenDecisionLog(path string, labels map[string]string) (*DecisionLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open decision log: %w", err)
	}
	return &DecisionLog{f: f, labels: labels}, nil
}

type opaEntry struct {
	Labels     map[string]string         `json:"labels,omitempty"`
	DecisionID string                    `json:"decision_id"`
	Path       string                    `json:"path"`
	Input      any                       `json:"input,omitempty"`
	Result     any                       `json:"result,omitempty"`
	Bundles    map[string]map[string]any `json:"bundles,omitempty"`
	Masked     []string                  `json:"masked,omitempty"`
	Timestamp  string                    `json:"timestamp"`
}

// RecordDecision appends one entry. Header and query values in the input are masked.
func (d *DecisionLog) RecordDecision(ctx context.Context, dec Decision) error {
	in, masked, err := maskInput(dec.Input)
	if err != nil {
		return err
	}
	e := opaEntry{Labels: d.labels, DecisionID: dec.DecisionID, Path: dec.Path, Input: in,
		Result: dec.Result, Masked: masked, Timestamp: dec.Timestamp.UTC().Format(time.RFC3339Nano)}
	if e.DecisionID == "" {
		e.DecisionID = NewID()
	}
	if e.Path == "" {
		e.Path = "airlock/decision"
	}
	if dec.Timestamp.IsZero() {
		e.Timestamp = time.Now().UTC().Format(time.RFC3339Nano)
	}
	if len(dec.Bundles) > 0 {
		e.Bundles = make(map[string]map[string]any, len(dec.Bundles))
		for name, rev := range dec.Bundles {
			e.Bundles[name] = map[string]any{"revision": rev}
		}
	}
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode decision log entry: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil {
		return ErrClosed
	}
	if _, err := d.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write decision log: %w", err)
	}
	return nil
}

// Close closes the file.
func (d *DecisionLog) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.f == nil {
		return nil
	}
	err := d.f.Close()
	d.f = nil
	return err
}

// maskInput round-trips the input through JSON and replaces the values under maskedPaths.
func maskInput(input any) (any, []string, error) {
	if input == nil {
		return nil, nil, nil
	}
	b, err := json.Marshal(input)
	if err != nil {
		return nil, nil, fmt.Errorf("encode decision input: %w", err)
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, nil, fmt.Errorf("decode decision input: %w", err)
	}
	var masked []string
	for _, p := range maskedPaths {
		if maskAt(doc, strings.Split(strings.TrimPrefix(p, "/input/"), "/")) {
			masked = append(masked, p)
		}
	}
	return doc, masked, nil
}

func maskAt(doc any, path []string) bool {
	m, ok := doc.(map[string]any)
	if !ok {
		return false
	}
	v, ok := m[path[0]]
	if !ok {
		return false
	}
	if len(path) > 1 {
		return maskAt(v, path[1:])
	}
	if path[0] == "query" {
		v = maskBareKeys(v)
	}
	m[path[0]] = maskValues(v)
	return true
}

// maskBareKeys renames query keys that had no value ("?TOKEN" parses as key TOKEN with an
// empty value), matching redact.Query, which redacts such items whole.
func maskBareKeys(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make(map[string]any, len(m))
	for k, vals := range m {
		if l, ok := vals.([]any); ok && allEmpty(l) {
			prev, _ := out[redact.Redacted].([]any)
			out[redact.Redacted] = append(prev, l...)
			continue
		}
		out[k] = vals
	}
	return out
}

func allEmpty(l []any) bool {
	for _, e := range l {
		if s, ok := e.(string); !ok || s != "" {
			return false
		}
	}
	return true
}

// maskValues keeps the shape (keys, list lengths) and replaces every leaf.
func maskValues(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = maskValues(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = maskValues(e)
		}
		return x
	default:
		return redact.Redacted
	}
}
