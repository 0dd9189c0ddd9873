package main

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/secrets"
)

// configErrors is every problem found in a config, one per line, each in the form
// FILE:LINE: dotted.key: what is wrong; what is expected (or --flag: ... when a flag set
// the value). main prints one line each.
type configErrors []error

func (e configErrors) Error() string {
	lines := make([]string, len(e))
	for i, err := range e {
		lines[i] = err.Error()
	}
	return strings.Join(lines, "\n")
}

func (e configErrors) Unwrap() []error { return e }

// errorLines is err as main prints it: one line per problem of a configErrors, else the
// error's text.
func errorLines(err error) []string {
	var ce configErrors
	if errors.As(err, &ce) {
		out := make([]string, len(ce))
		for i, e := range ce {
			out[i] = e.Error()
		}
		return out
	}
	return []string{err.Error()}
}

// leaves flattens errors.Join trees into their single errors.
func leaves(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	return []error{err}
}

// keyEntry is one key of the config file: its dotted path, the line it is on, its value
// node, the Go type the value decodes into and the struct type holding the key (nil when
// the file's structure left the known types).
type keyEntry struct {
	key, name string
	line      int
	value     *yaml.Node
	typ       reflect.Type
	parent    reflect.Type
}

// keyLines maps dotted key paths of the config file to their lines, so that errors can say
// where the key is; it also knows each value's Go type, to say what a value should be.
type keyLines struct {
	file    string
	lines   map[string]int
	entries []keyEntry
	// flags maps a config key to the flag that set it on the command line; errors about
	// the key name the flag instead.
	flags map[string]string
}

func (k *keyLines) walk(n *yaml.Node, prefix string, t reflect.Type) {
	if k.lines == nil {
		k.lines = map[string]int{}
	}
	t = deref(t)
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			k.walk(c, prefix, t)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			name := n.Content[i].Value
			key := name
			if prefix != "" {
				key = prefix + "." + name
			}
			var ft reflect.Type
			if t != nil {
				switch t.Kind() {
				case reflect.Struct:
					if f, ok := yamlField(t, name); ok {
						ft = f.Type
					}
				case reflect.Map:
					ft = t.Elem()
				}
			}
			k.lines[key] = n.Content[i].Line
			k.entries = append(k.entries, keyEntry{key: key, name: name, line: n.Content[i].Line, value: n.Content[i+1], typ: ft, parent: t})
			k.walk(n.Content[i+1], key, ft)
		}
	case yaml.SequenceNode:
		var et reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			et = t.Elem()
		}
		for i, c := range n.Content {
			key := fmt.Sprintf("%s[%d]", prefix, i)
			k.lines[key] = c.Line
			k.entries = append(k.entries, keyEntry{key: key, line: c.Line, value: c, typ: et})
			k.walk(c, key, et)
		}
	}
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// yamlField is the field of struct t that YAML key name decodes into.
func yamlField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// yamlKeys are the keys struct t knows.
func yamlKeys(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); tag != "" && tag != "-" {
			out = append(out, tag)
		}
	}
	return out
}

var (
	yamlLineRE    = regexp.MustCompile(`^line (\d+): (.*)$`)
	yamlUnknownRE = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
	yamlTypeRE    = regexp.MustCompile("^cannot unmarshal (!!\\w+)(?: `(.*)`)? into (\\S+)$")
)

// decodeErrors rewrites yaml.v3's errors (unknown keys, values of the wrong type) as
// located problems that name the dotted key and say what it should be.
func (k *keyLines) decodeErrors(err error) []error {
	var msgs []string
	if te, ok := err.(*yaml.TypeError); ok {
		msgs = te.Errors
	} else {
		msgs = []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var out []error
	for _, m := range msgs {
		line := 0
		if sm := yamlLineRE.FindStringSubmatch(m); sm != nil {
			line, _ = strconv.Atoi(sm[1])
			m = sm[2]
		}
		if sm := yamlUnknownRE.FindStringSubmatch(m); sm != nil {
			if e := k.unknownKey(line, sm[1]); e != nil {
				out = append(out, e)
				continue
			}
			m = "unknown key " + sm[1]
		}
		if sm := yamlTypeRE.FindStringSubmatch(m); sm != nil {
			if e := k.badValue(line, sm[1], sm[2]); e != nil {
				out = append(out, e)
				continue
			}
			m = fmt.Sprintf("%s is not %s", sm[2], describe(nil, sm[3]))
		}
		out = append(out, &configError{file: k.file, line: line, err: errors.New(m)})
	}
	return out
}

// unknownKey names the key, its section's keys, and the one it most likely misspells.
func (k *keyLines) unknownKey(line int, name string) error {
	for _, e := range k.entries {
		if e.name != name || e.line != line || e.parent == nil || e.parent.Kind() != reflect.Struct {
			continue
		}
		known := yamlKeys(e.parent)
		msg := "unknown key"
		if s := suggest(name, known); s != "" {
			msg += "; did you mean " + s + "?"
		} else {
			msg += "; want one of " + strings.Join(known, ", ")
		}
		return &configError{file: k.file, line: line, key: e.key, err: fmt.Errorf("%s: %s", e.key, msg)}
	}
	return nil
}

// badValue names the key whose value on line could not be decoded and says what it takes.
func (k *keyLines) badValue(line int, tag, shown string) error {
	trunc, isTrunc := strings.CutSuffix(shown, "...")
	for _, e := range k.entries {
		v := e.value
		if v == nil || v.Line != line || e.typ == nil {
			continue
		}
		switch tag {
		case "!!seq":
			if v.Kind != yaml.SequenceNode {
				continue
			}
		case "!!map":
			if v.Kind != yaml.MappingNode {
				continue
			}
		default:
			if v.Kind != yaml.ScalarNode || !(v.Value == shown || isTrunc && strings.HasPrefix(v.Value, trunc)) {
				continue
			}
		}
		what := "a list"
		switch v.Kind {
		case yaml.MappingNode:
			what = "a mapping"
		case yaml.ScalarNode:
			what = strconv.Quote(v.Value)
		}
		if d, err := time.ParseDuration(v.Value); err == nil && d < 0 && slices.Contains(durationTypes, e.typ) {
			return &configError{file: k.file, line: line, key: e.key,
				err: fmt.Errorf("%s: %s is negative; want a positive duration such as 90s", e.key, v.Value)}
		}
		if _, err := strconv.ParseFloat(v.Value, 64); err == nil && v.Kind == yaml.ScalarNode && slices.Contains(durationTypes, e.typ) {
			return &configError{file: k.file, line: line, key: e.key,
				err: fmt.Errorf("%s: %s has no unit; want a duration such as %ss or %sm", e.key, v.Value, v.Value, v.Value)}
		}
		return &configError{file: k.file, line: line, key: e.key,
			err: fmt.Errorf("%s: %s is not %s", e.key, what, describe(e.typ, ""))}
	}
	return nil
}

var (
	durationTypes = []reflect.Type{reflect.TypeFor[time.Duration](), reflect.TypeFor[approval.Duration](), reflect.TypeFor[secrets.Duration]()}
	byteSizeType  = reflect.TypeFor[approval.ByteSize]()
)

// describe says in words what a value of type t (or, unknown, of the Go type named name)
// must be: "a duration; want ...".
func describe(t reflect.Type, name string) string {
	if t != nil {
		name = t.String()
		switch {
		case slices.Contains(durationTypes, t):
			return "a duration; want a number with a unit, such as 250ms, 90s or 5m"
		case t == byteSizeType:
			return "a size; want a number of bytes, or one with a unit such as 512KiB or 1MiB"
		}
		switch t.Kind() {
		case reflect.Bool:
			return "a boolean; want true or false"
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			return "a whole number; want digits only, such as 512"
		case reflect.Float32, reflect.Float64:
			return "a number; want a number such as 1.5"
		case reflect.String:
			return "a single value; want text (quote it if it looks like a list or a mapping)"
		case reflect.Slice, reflect.Array:
			return "a list; want [a, b] or one \"- item\" line each"
		case reflect.Map, reflect.Struct:
			return "a mapping; want key: value lines (or {key: value})"
		}
	}
	return "a valid " + name
}

// suggest is the known key closest to name, if it is close enough to be a misspelling.
func suggest(name string, known []string) string {
	best, bestD := "", 3
	if len(name) <= 4 {
		bestD = 2
	}
	for _, k := range known {
		if d := editDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Damerau-Levenshtein distance (with adjacent transpositions).
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range rb {
		d[0][j+1] = j + 1
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// configError is a config problem located in its file.
type configError struct {
	file string
	line int
	key  string // the dotted key, when known
	err  error
}

func (e *configError) Error() string {
	switch {
	case e.file == "":
		return e.err.Error()
	case e.line > 0:
		return fmt.Sprintf("%s:%d: %v", e.file, e.line, e.err)
	}
	return fmt.Sprintf("%s: %v", e.file, e.err)
}

func (e *configError) Unwrap() error { return e.err }

// keyOf is the longest key of keys that msg starts with, as a whole key.
func keyOf(msg string, keys func(yield func(string) bool)) string {
	best := ""
	for key := range keys {
		if len(key) > len(best) && strings.HasPrefix(msg, key) && (len(msg) == len(key) || strings.ContainsRune(":. [", rune(msg[len(key)]))) {
			best = key
		}
	}
	return best
}

// locate turns each of err's problems (errors from Validate and the start-up checks, whose
// messages start with the dotted key) into a configErrors: a key a flag set is named as
// the flag, a key of the file with its file and line.
func (k *keyLines) locate(err error) error {
	if err == nil {
		return nil
	}
	var out configErrors
	for _, e := range leaves(err) {
		out = append(out, k.locateOne(e))
	}
	// In the order of the file: flags' problems first, then by line.
	slices.SortStableFunc(out, func(a, b error) int { return lineOf(a) - lineOf(b) })
	return out
}

func lineOf(err error) int {
	var ce *configError
	if errors.As(err, &ce) {
		return ce.line
	}
	return 0
}

func (k *keyLines) locateOne(err error) error {
	var ce *configError
	if errors.As(err, &ce) {
		return err
	}
	msg := err.Error()
	if k == nil {
		return err
	}
	flagKey := keyOf(msg, func(yield func(string) bool) {
		for key := range k.flags {
			if !yield(key) {
				return
			}
		}
	})
	if flagKey != "" {
		rest := msg[len(flagKey):]
		if strings.HasPrefix(rest, "[") {
			if i := strings.IndexByte(rest, ']'); i >= 0 {
				rest = rest[i+1:]
			}
		}
		rest = strings.TrimPrefix(strings.TrimPrefix(rest, ":"), " ")
		return fmt.Errorf("%s: %s", k.flags[flagKey], rest)
	}
	if k.file == "" {
		return err
	}
	key := keyOf(msg, func(yield func(string) bool) {
		for key := range k.lines {
			if !yield(key) {
				return
			}
		}
	})
	return &configError{file: k.file, line: k.lines[key], key: key, err: err}
}

// dropShadowed leaves out problems found by Validate about keys whose values could not be
// decoded (already reported, and left at their zero value).
func dropShadowed(decoded []error, validated []error) []error {
	var bad []string
	for _, e := range decoded {
		var ce *configError
		if errors.As(e, &ce) && ce.key != "" {
			bad = append(bad, ce.key)
		}
	}
	var out []error
	for _, e := range validated {
		msg := e.Error()
		shadowed := false
		for _, b := range bad {
			if strings.HasPrefix(msg, b) && (len(msg) == len(b) || strings.ContainsRune(":. [", rune(msg[len(b)]))) {
				shadowed = true
			}
		}
		if !shadowed {
			out = append(out, e)
		}
	}
	return out
}
