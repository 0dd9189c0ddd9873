package main

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
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

// dropShadowed leaves out later problems (found by Validate, or by preflight) about keys
// an earlier problem is about: a value that could not be decoded, or was refused, is
// already reported, and later checks saw its zero value or default.
func dropShadowed(earlier []error, later []error) []error {
	var bad []string
	for _, e := range earlier {
		var ce *configError
		if errors.As(e, &ce) {
			if ce.key != "" {
				bad = append(bad, ce.key)
			}
		} else if k, _, ok := cutKey(e.Error()); ok {
			bad = append(bad, k)
		}
	}
	var out []error
	for _, e := range later {
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
