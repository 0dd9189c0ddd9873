package jsondoc

import (
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

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
	start := p.i
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
	mantissa := 1
	if p.i < len(p.b) && p.b[p.i] == '0' {
		p.i++
	} else if mantissa = digits(); mantissa == 0 {
		return p.fail("invalid number", nil)
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		n := digits()
		if n == 0 {
			return p.fail("invalid number: no digits after '.'", nil)
		}
		mantissa += n
	}
	exp := 0
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		from := p.i
		if digits() == 0 {
			return p.fail("invalid number: no digits in exponent", nil)
		}
		for _, c := range p.b[from:p.i] {
			if exp = exp*10 + int(c-'0'); exp > MaxNumberScale {
				break
			}
		}
	}
	if mantissa+exp > MaxNumberScale {
		at := p.i
		p.i = start
		err := p.fail(fmt.Sprintf("number of %d bytes is out of range: its digits and exponent exceed %d", at-start, MaxNumberScale), ErrNumberRange)
		p.i = at
		return err
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
