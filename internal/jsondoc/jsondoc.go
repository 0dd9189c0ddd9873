// Package jsondoc parses JSON documents strictly, for decisions taken on what a body says:
// a document that two parsers could read differently is an error, not a guess. Besides RFC
// 8259's grammar it refuses duplicate object keys (after unescaping), invalid UTF-8, lone
// surrogate escapes, a byte order mark, NaN and Infinity, and nesting deeper than a bound.
// What remains means the same to every conforming parser.
package jsondoc

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
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
)

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

type parser struct {
	b   []byte
	i   int
	max int
	// Members of the containers being parsed, innermost last: a container's members are
	// copied into one exactly sized slice when it closes, instead of growing a slice each.
	vals []Value
	keys []string
}

func (p *parser) fail(msg string, err error) error {
	return &SyntaxError{Offset: p.i, Msg: msg, Err: err}
}

func (p *parser) skipSpace() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// value parses the value at p.i. Values are returned, not written through a pointer: a
// pointer to a local passed down this recursion would move every member to the heap.
func (p *parser) value(depth int) (Value, error) {
	var v Value
	if p.i >= len(p.b) {
		return v, p.fail("unexpected end of input", nil)
	}
	start := p.i
	var err error
	switch c := p.b[p.i]; {
	case c == '{':
		if depth >= p.max {
			return v, p.fail("nesting deeper than "+strconv.Itoa(p.max), ErrTooDeep)
		}
		v.Kind = Object
		v.Keys, v.Elems, err = p.object(depth + 1)
	case c == '[':
		if depth >= p.max {
			return v, p.fail("nesting deeper than "+strconv.Itoa(p.max), ErrTooDeep)
		}
		v.Kind = Array
		v.Elems, err = p.array(depth + 1)
	case c == '"':
		v.Kind = String
		v.Str, err = p.str()
	case c == '-' || c >= '0' && c <= '9':
		err = p.number()
		v.Kind, v.Str = Number, unsafe.String(unsafe.SliceData(p.b[start:]), p.i-start)
	case p.lit("true"):
		v.Kind, v.Str = Bool, "true"
	case p.lit("false"):
		v.Kind, v.Str = Bool, "false"
	case p.lit("null"):
		v.Kind = Null
	default:
		return v, p.fail(fmt.Sprintf("unexpected character %q", rune(c)), nil)
	}
	if err != nil {
		return Value{}, err
	}
	v.Raw = p.b[start:p.i:p.i]
	return v, nil
}

func (p *parser) lit(s string) bool {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// object parses an object's members after p.i (which is '{').
func (p *parser) object(depth int) ([]string, []Value, error) {
	p.i++ // {
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return nil, nil, nil
	}
	mark := len(p.vals)
	var seen map[string]struct{} // for large objects: a linear scan would be quadratic
	for {
		p.skipSpace()
		if p.i >= len(p.b) || p.b[p.i] != '"' {
			return nil, nil, p.fail("expected a string as object key", nil)
		}
		keyAt := p.i
		k, err := p.str()
		if err != nil {
			return nil, nil, err
		}
		dup := false
		if members := p.keys[mark:]; seen == nil && len(members) < 16 {
			for _, s := range members {
				dup = dup || s == k
			}
		} else {
			if seen == nil {
				seen = make(map[string]struct{}, 2*len(members))
				for _, s := range members {
					seen[s] = struct{}{}
				}
			}
			_, dup = seen[k]
			seen[k] = struct{}{}
		}
		if dup {
			return nil, nil, &SyntaxError{Offset: keyAt, Msg: "duplicate object key " + strconv.Quote(k), Err: ErrDuplicateKey}
		}
		p.skipSpace()
		if p.i >= len(p.b) || p.b[p.i] != ':' {
			return nil, nil, p.fail("expected ':' after object key", nil)
		}
		p.i++
		p.skipSpace()
		m, err := p.value(depth)
		if err != nil {
			return nil, nil, err
		}
		p.keys = append(p.keys, k)
		p.vals = append(p.vals, m)
		p.skipSpace()
		if p.i >= len(p.b) {
			return nil, nil, p.fail("unexpected end of input in object", nil)
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case '}':
			p.i++
			keys := append([]string(nil), p.keys[mark:]...)
			elems := append([]Value(nil), p.vals[mark:]...)
			p.keys, p.vals = p.keys[:mark], p.vals[:mark]
			return keys, elems, nil
		default:
			return nil, nil, p.fail("expected ',' or '}' in object", nil)
		}
	}
}

// array parses an array's elements after p.i (which is '[').
func (p *parser) array(depth int) ([]Value, error) {
	p.i++ // [
	p.skipSpace()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return nil, nil
	}
	mark := len(p.vals)
	for {
		p.skipSpace()
		e, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		p.vals = append(p.vals, e)
		p.keys = append(p.keys, "") // keeps keys and vals the same length
		p.skipSpace()
		if p.i >= len(p.b) {
			return nil, p.fail("unexpected end of input in array", nil)
		}
		switch p.b[p.i] {
		case ',':
			p.i++
		case ']':
			p.i++
			elems := append([]Value(nil), p.vals[mark:]...)
			p.keys, p.vals = p.keys[:mark], p.vals[:mark]
			return elems, nil
		default:
			return nil, p.fail("expected ',' or ']' in array", nil)
		}
	}
}

// number checks RFC 8259's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *parser) number() error {
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.b[p.i] == '-' {
		p.i++
	}
	if p.i < len(p.b) && p.b[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		return p.fail("invalid number", nil)
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if digits() == 0 {
			return p.fail("invalid number: no digits after '.'", nil)
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return p.fail("invalid number: no digits in exponent", nil)
		}
	}
	return nil
}

// str reads a string at p.i (which is '"') and returns its decoded text. The input is
// already known to be valid UTF-8.
func (p *parser) str() (string, error) {
	p.i++
	start := p.i
	// Fast path: no escapes.
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			// The document's bytes do not change (Parse's contract): the string shares them.
			s := unsafe.String(unsafe.SliceData(p.b[start:]), p.i-start)
			p.i++
			return s, nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.fail("control character in string", nil)
		}
		p.i++
	}
	buf := append([]byte(nil), p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(buf), nil
		case c < 0x20:
			return "", p.fail("control character in string", nil)
		case c != '\\':
			buf = append(buf, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.b) {
			break
		}
		e := p.b[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			buf = append(buf, e)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", p.fail(`invalid \u escape`, nil)
			}
			if utf16.IsSurrogate(r) {
				lo, ok2 := rune(0), false
				if r < 0xDC00 && p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
					p.i += 2
					lo, ok2 = p.hex4()
				}
				r = utf16.DecodeRune(r, lo)
				if !ok2 || r == utf8.RuneError {
					return "", p.fail(`lone surrogate in \u escape (not valid Unicode)`, ErrInvalidUTF8)
				}
			}
			buf = utf8.AppendRune(buf, r)
		default:
			p.i--
			return "", p.fail(fmt.Sprintf(`invalid escape '\%c'`, e), nil)
		}
	}
	return "", p.fail("unterminated string", nil)
}

func (p *parser) hex4() (rune, bool) {
	if len(p.b)-p.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}
