package jsondoc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
)

func TestParseAccepts(t *testing.T) {
	tests := []struct {
		in   string
		want any // as encoding/json decodes it with UseNumber
	}{
		{`{"a":1}`, map[string]any{"a": json.Number("1")}},
		{` [1, -0.5e3, "x", true, false, null] `, []any{json.Number("1"), json.Number("-0.5e3"), "x", true, false, nil}},
		{`"tools\u002fcall"`, "tools/call"},
		{`"\ud83d\ude00 \u00e9\n\"\\\/"`, "😀 é\n\"\\/"},
		{`{"a":{"b":[{}]}}`, map[string]any{"a": map[string]any{"b": []any{map[string]any{}}}}},
		{`0`, json.Number("0")},
		// Beyond float64: valid JSON, and the policy sees the literal (an ast.Number keeps
		// it), so Parse accepts what a float64 cannot hold.
		{`1e400`, json.Number("1e400")},
		{strings.Repeat("8", 320), json.Number(strings.Repeat("8", 320))},
		{`1e4000`, json.Number("1e4000")}, // within MaxNumberScale
		{`-1.5e-4000`, json.Number("-1.5e-4000")},
	}
	for _, tc := range tests {
		v, err := Parse([]byte(tc.in), 0)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		var got any
		if err := unmarshalNumbers(v.Raw, &got); err != nil {
			t.Fatal(err)
		}
		g, _ := json.Marshal(toAny(v))
		w, _ := json.Marshal(tc.want)
		if string(g) != string(w) {
			t.Errorf("Parse(%q) = %s, want %s", tc.in, g, w)
		}
	}
}

// toAny converts a Value as encoding/json decodes it with UseNumber: numbers keep their
// literal, as they do when the policy sees them (rego's jsonTerm).
func toAny(v *Value) any {
	switch v.Kind {
	case Null:
		return nil
	case Bool:
		return v.Str == "true"
	case Number:
		return json.Number(v.Str)
	case String:
		return v.Str
	case Array:
		out := []any{}
		for i := range v.Elems {
			out = append(out, toAny(&v.Elems[i]))
		}
		return out
	default:
		out := map[string]any{}
		for i, k := range v.Keys {
			out[k] = toAny(&v.Elems[i])
		}
		return out
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct {
		name, in string
		is       error
		msg      string
	}{
		{"duplicate key", `{"a":1,"a":2}`, ErrDuplicateKey, `duplicate object key "a"`},
		{"duplicate after unescape", `{"method":"x","m\u0065thod":"y"}`, ErrDuplicateKey, "duplicate"},
		{"duplicate in large object", `{` + manyKeys(40) + `,"k7":0}`, ErrDuplicateKey, "duplicate"},
		{"invalid utf-8", "{\"a\":\"\xff\"}", ErrInvalidUTF8, "UTF-8"},
		{"lone high surrogate", `"\ud800"`, ErrInvalidUTF8, "surrogate"},
		{"lone low surrogate", `"\udc00x"`, ErrInvalidUTF8, "surrogate"},
		{"bom", "\ufeff{}", nil, "unexpected character"},
		{"nan", `NaN`, nil, "unexpected"},
		{"infinity", `[Infinity]`, nil, "unexpected"},
		{"leading zero", `01`, nil, "after the JSON value"},
		{"trailing comma", `[1,]`, nil, "unexpected character"},
		{"trailing data", `{} {}`, nil, "after the JSON value"},
		{"control char", "\"a\tb\"", nil, "control character"},
		{"single quotes", `{'a':1}`, nil, "key"},
		{"bad escape", `"\x41"`, nil, "invalid escape"},
		{"too deep", strings.Repeat("[", 200) + strings.Repeat("]", 200), ErrTooDeep, "nesting"},
		{"empty", ``, nil, "end of input"},
		{"unterminated", `"abc`, nil, "unterminated"},
		// Red team: 1e9999999 in a body made OPA panic comparing it (math/big refuses the
		// exponent), which killed airlock from inside goproxy's interception goroutine.
		{"huge exponent", `{"amount":1e9999999}`, ErrNumberRange, "out of range"},
		{"huge negative exponent", `[1e-9999999]`, ErrNumberRange, "out of range"},
		{"negative huge", `-1e4096`, ErrNumberRange, "exceed 4096"},
		{"huge exponent overflowing int", `1e99999999999999999999999999`, ErrNumberRange, "out of range"},
		{"many digits", strings.Repeat("9", 5000), ErrNumberRange, "out of range"},
		{"many fraction digits", "0." + strings.Repeat("1", 4100), ErrNumberRange, "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in), 0)
			if err == nil {
				t.Fatalf("Parse(%q) succeeded, want an error", tc.in)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not say %q", err, tc.msg)
			}
		})
	}
}

func manyKeys(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + strconv.Itoa(i) + `":0`)
	}
	return b.String()
}

// FuzzParse: whatever Parse accepts, encoding/json accepts too and decodes to the same
// document (numbers as json.Number: a literal beyond float64's range is valid JSON, and the
// policy sees literals, not floats); and Parse never panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}]}`, `"\ud83d\ude00"`, `{"a":1,"a":2}`, `-0.0e+1`, `[]`, strings.Repeat("8", 320)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Parse(b, 0)
		if err != nil {
			return
		}
		var want any
		if err := unmarshalNumbers(b, &want); err != nil {
			t.Fatalf("Parse accepted %q, encoding/json refuses it: %v", b, err)
		}
		g, _ := json.Marshal(toAny(v))
		w, _ := json.Marshal(want)
		if string(g) != string(w) {
			t.Fatalf("Parse(%q) = %s, encoding/json reads %s", b, g, w)
		}
	})
}

// Parses reuse the parser's member stacks: a document parsed earlier, or one whose parse
// failed half way, must not see its values change when another is parsed.
func TestParsesAreIndependent(t *testing.T) {
	first, err := Parse([]byte(`{"a":[1,2,{"b":"c"}],"d":"e"}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(toAny(first))
	if _, err := Parse([]byte(`{"x":[9,8,{"y":"z","y":1}]}`), 0); err == nil {
		t.Fatal("duplicate key accepted")
	}
	big := "[" + strings.Repeat(`{"k":[1,2,3]},`, 300) + "0]"
	for _, doc := range []string{big, `{"p":{"q":{"r":[true,false,null]}},"s":"t"}`} {
		if _, err := Parse([]byte(doc), 0); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := json.Marshal(toAny(first)); string(got) != string(want) {
		t.Errorf("after other parses: got %s, want %s", got, want)
	}
}

// unmarshalNumbers is json.Unmarshal with UseNumber: one document, nothing after it.
func unmarshalNumbers(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return fmt.Errorf("data after the document: %v", err)
	}
	return nil
}
