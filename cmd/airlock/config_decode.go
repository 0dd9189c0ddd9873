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

// This file words yaml.v3's decoding errors as located problems: the dotted key, what is
// wrong, what is expected, and the key a misspelt one most likely meant.

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
