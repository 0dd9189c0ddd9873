// Package jsondoc parses JSON documents strictly, for decisions taken on what a body says:
// a document that two parsers could read differently is an error, not a guess. Besides RFC
// 8259's grammar it refuses duplicate object keys (after unescaping), invalid UTF-8, lone
// surrogate escapes, a byte order mark, NaN and Infinity, and nesting deeper than a bound.
// What remains means the same to every conforming parser.
package jsondoc

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Kind is the JSON type of a Value.
type Kind uint8

const (
	Null Kind = iota + 1
	Bool
	Number
	String
	Array
	Object
)

// Value is one parsed JSON value. Raw is always the value's exact bytes in the document.
type Value struct {
	Kind Kind
	Raw  []byte
	// Str is the decoded text of a String, the literal of a Number, "true" or "false".
	Str string
	// Elems are an Array's elements, or an Object's member values in document order.
	Elems []Value
	// Keys are an Object's member names (decoded), parallel to Elems; never duplicated.
	Keys []string
}

// Get returns the member key of an Object, or nil.
func (v *Value) Get(key string) *Value {
	if v == nil || v.Kind != Object {
		return nil
	}
	for i, k := range v.Keys {
		if k == key {
			return &v.Elems[i]
		}
	}
	return nil
}

// String returns the decoded text of a String value and whether v is one.
func (v *Value) String() (string, bool) {
	if v == nil || v.Kind != String {
		return "", false
	}
	return v.Str, true
}

// MarshalJSON returns the value's exact bytes.
func (v Value) MarshalJSON() ([]byte, error) {
	if v.Kind == 0 {
		return []byte("null"), nil
	}
	return v.Raw, nil
}

// UnmarshalJSON parses b strictly (for documents that come from a file, such as the
// input of `airlock policy eval`).
func (v *Value) UnmarshalJSON(b []byte) error {
	p, err := Parse(append([]byte(nil), b...), 0)
	if err != nil {
		return err
	}
	*v = *p
	return nil
}

// DefaultMaxDepth bounds nesting when Parse is given 0.
const DefaultMaxDepth = 128

// Errors a caller may want to tell apart; every error from Parse is a *SyntaxError that
// wraps one of these or describes a grammar error.
var (
	ErrDuplicateKey = errors.New("duplicate object key")
	ErrInvalidUTF8  = errors.New("invalid UTF-8")
	ErrTooDeep      = errors.New("nesting too deep")
	ErrNumberRange  = errors.New("number out of range")
)

// MaxNumberScale bounds a number's size: its mantissa digits plus its exponent's
// magnitude. Numbers reach the policy as literals (arbitrary precision), and OPA's
// comparisons of huge ones cost time without bound or panic (1e9999999: math/big refuses
// the exponent, and OPA panics on that); 4096 keeps every float64 and integers of
// thousands of digits.
const MaxNumberScale = 4096

// SyntaxError says what is wrong and at which byte offset.
type SyntaxError struct {
	Offset int
	Msg    string
	Err    error // a sentinel above, or nil
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid JSON at byte %d: %s", e.Offset, e.Msg)
}

func (e *SyntaxError) Unwrap() error { return e.Err }

// Parse parses one JSON document (surrounding whitespace allowed, nothing else). Values
// keep references into b (Raw, and the text of strings without escapes and of numbers): b
// must not change afterwards. maxDepth 0 is DefaultMaxDepth.
func Parse(b []byte, maxDepth int) (*Value, error) {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	if !utf8.Valid(b) {
		off := 0
		for off < len(b) {
			r, n := utf8.DecodeRune(b[off:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			off += n
		}
		return nil, &SyntaxError{Offset: off, Msg: "the body is not valid UTF-8", Err: ErrInvalidUTF8}
	}
	sc := scratchPool.Get().(*scratch)
	p := parser{b: b, max: maxDepth, vals: sc.vals[:0], keys: sc.keys[:0]}
	p.skipSpace()
	v, err := p.value(0)
	sc.put(p.vals, p.keys)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.i != len(b) {
		return nil, p.fail("unexpected data after the JSON value", nil)
	}
	return &v, nil
}
