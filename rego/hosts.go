package rego

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/big"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/airlock-proxy/airlock/internal/hostname"
)

// HostsKey is the data document of host lists: data.hosts.<list>[<host>] is a host's entry
// in a list, keyed by the host as the policy input has it (lower case, no trailing dot,
// IDNA in ASCII).
const HostsKey = "hosts"

// A kind is what a setting of a host entry must hold.
type kind int

const (
	kText  kind = iota // a string
	kPath              // a string starting with "/"
	kFlag              // true or false
	kPort              // a port number, 1 to 65535
	kTexts             // a list of strings
	kPaths             // a list of strings starting with "/"
	kPorts             // a list of port numbers
)

var kindWant = map[kind]string{
	kText: "a string", kPath: `a path starting with "/"`, kFlag: "true or false", kPort: "a port number, 1 to 65535",
	kTexts: "a list of strings",
	kPaths: `a list of paths starting with "/"`, kPorts: "a list of port numbers such as [443]",
}

// elem is the kind of a list kind's elements.
var elem = map[kind]kind{kTexts: kText, kPaths: kPath, kPorts: kPort}

type setting struct {
	name     string
	kind     kind
	required bool
}

// shippedLists are the host lists the shipped rules read and the settings they read of an
// entry. A rule tests membership with the bare entry, data.hosts.<list>[input.request.host]
// (which OPA's rule index reads), then reads the settings: an entry that is not an object,
// or a setting of another type than the rule expects (ports as strings, say), makes the
// list's rules silently not apply to the host, leaving it to whatever other list holds it,
// or to none. Lists of a policy's own (custom rules may key hosts to true) are not checked.
var shippedLists = map[string][]setting{
	"registries":   {{"ecosystem", kText, true}, {"ports", kPorts, false}, {"read_posts", kPaths, false}},
	"github":       {{"authenticated", kFlag, false}, {"ports", kPorts, false}},
	"internal_api": {{"credential", kText, true}, {"tenants", kTexts, true}, {"ports", kPorts, false}},
	"mcp":          {{"path", kPath, true}, {"read_tools", kTexts, false}, {"credential", kText, false}, {"ports", kPorts, false}},
	"tunnel":       {{"ports", kPorts, false}},
}

// checkHostLists reads data.hosts. In the lists the shipped rules read, every entry is an
// object whose settings have the types the rules expect, every host is written as the
// policy input has it, and no host is in two lists (its rules would be two lists' at once,
// and one list's refusal could be the other's allow). Anything else is an error naming the
// entry, so the policy does not load and the last good one stays in force.
func checkHostLists(data map[string]any) error {
	raw, ok := data[HostsKey]
	if !ok {
		return nil
	}
	lists, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("data.%s is %s, want an object of host lists such as {\"github\": {\"github.com\": {}}}", HostsKey, kindOf(raw))
	}
	listOf := map[string]string{} // host → the shipped list it is in
	for _, name := range slices.Sorted(maps.Keys(lists)) {
		settings, shipped := shippedLists[name]
		if !shipped {
			continue
		}
		list, ok := lists[name].(map[string]any)
		if !ok {
			return fmt.Errorf("data.%s.%s is %s, want an object keyed by host such as {\"example.com\": {}}", HostsKey, name, kindOf(lists[name]))
		}
		for _, host := range slices.Sorted(maps.Keys(list)) {
			at := fmt.Sprintf("data.%s.%s[%q]", HostsKey, name, host)
			if err := checkHostKey(host); err != nil {
				return fmt.Errorf("%s: %w", at, err)
			}
			entry, ok := list[host].(map[string]any)
			if !ok {
				return fmt.Errorf("%s is %s, want an object of the host's settings ({} for none); the shipped rules skip a host whose entry is not an object", at, kindOf(list[host]))
			}
			for _, s := range settings {
				if err := s.check(entry); err != nil {
					return fmt.Errorf("%s%w", at, err)
				}
			}
			if other, dup := listOf[host]; dup {
				return fmt.Errorf("%s: %s is also in data.%s.%s; a host belongs to one list", at, host, HostsKey, other)
			}
			listOf[host] = name
		}
	}
	return nil
}

// check reads the setting in a host's entry: a missing required one, or one of another
// kind, is an error that follows the entry's name (naming the list element at fault).
func (s setting) check(entry map[string]any) error {
	v, set := entry[s.name]
	switch {
	case !set && s.required:
		return fmt.Errorf(" has no %q; want %s", s.name, kindWant[s.kind])
	case !set || s.kind.holds(v):
		return nil
	}
	what, got, want := s.name, v, s.kind
	list, isList := v.([]any)
	if ek, listKind := elem[s.kind]; isList && listKind {
		for i, e := range list {
			if !ek.holds(e) {
				what, got, want = fmt.Sprintf("%s[%d]", s.name, i), e, ek
				break
			}
		}
	}
	return fmt.Errorf(".%s is %s, want %s; the shipped rules skip a host whose setting they cannot read", what, kindOf(got), kindWant[want])
}

// checkHostRules refuses rules that define a host list the shipped rules read (package
// hosts, or hosts.github, ...), and `with` statements that replace one: those lists are data,
// checked as they load (checkHostLists); a list a rule makes or a `with` swaps in would
// escape the check, and could differ per request. (Tests, not compiled into the policy,
// may replace them.)
func checkHostRules(c *ast.Compiler) error {
	for _, name := range slices.Sorted(maps.Keys(c.Modules)) {
		var withErr error
		ast.WalkExprs(c.Modules[name], func(e *ast.Expr) bool {
			for _, w := range e.With {
				if ref, ok := w.Target.Value.(ast.Ref); ok && withErr == nil && replacesHostList(ref) {
					withErr = fmt.Errorf("%s: `with %s` replaces a host list the shipped rules read; the host lists are data, checked as they load", w.Location, w.Target)
				}
			}
			return withErr != nil
		})
		if withErr != nil {
			return withErr
		}
		for _, r := range c.Modules[name].Rules {
			if ref := r.Ref(); replacesHostList(ref) {
				return fmt.Errorf("%s: rule %s defines a host list the shipped rules read (%s); those lists are data (data.json or data.yaml), checked as they load, not rules",
					r.Location, ref, strings.Join(slices.Sorted(maps.Keys(shippedLists)), ", "))
			}
		}
	}
	return nil
}

// replacesHostList reports whether ref (a `with` target, a rule's) is data.hosts, one of
// the shipped lists, any list (data.hosts[x]), or within one.
func replacesHostList(ref ast.Ref) bool {
	if len(ref) < 2 || !ref[0].Equal(ast.DefaultRootDocument) || !ref[1].Equal(ast.StringTerm(HostsKey)) {
		return false
	}
	if len(ref) == 2 {
		return true
	}
	list, ok := ref[2].Value.(ast.String)
	_, shipped := shippedLists[string(list)]
	return !ok || shipped
}

// checkHostKey refuses a key that no request's host can equal: the policy input has hosts
// in one form (hostname.Normalize).
func checkHostKey(host string) error {
	n, err := hostname.Normalize(host)
	if err != nil || n != host {
		want := ""
		if err == nil {
			want = fmt.Sprintf(" (%q)", n)
		}
		return fmt.Errorf("host %q is not written as the policy input has it%s: lower case, IDNA in ASCII (punycode), no port, no trailing dot", host, want)
	}
	return nil
}

// holds reports whether v is of kind k.
func (k kind) holds(v any) bool {
	switch k {
	case kText:
		_, ok := v.(string)
		return ok
	case kPath:
		s, ok := v.(string)
		return ok && strings.HasPrefix(s, "/")
	case kFlag:
		_, ok := v.(bool)
		return ok
	case kPort:
		n, ok := wholeNumber(v)
		return ok && n >= 1 && n <= 65535
	}
	list, ok := v.([]any)
	if !ok {
		return false
	}
	for _, e := range list {
		if !elem[k].holds(e) {
			return false
		}
	}
	return true
}

// wholeNumber reads a number of the policy's data that is a whole number. OPA's loaders
// (JSON, YAML, bundles) give numbers as json.Number.
func wholeNumber(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	// Exactly, as OPA compares numbers: 443.0 and 4.43e2 are 443; 443.0000000000000001 is
	// not, though a float64 would round it to 443.
	if f, err := n.Float64(); err != nil || math.Abs(f) > 1<<53 {
		return 0, false // not a port; and 1e100000000 is not worth making exact
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok || !r.IsInt() || !r.Num().IsInt64() {
		return 0, false
	}
	return r.Num().Int64(), true
}

// kindOf names a JSON value's type for an error message.
func kindOf(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return fmt.Sprintf("%t", v)
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("a number (%v)", v)
	}
}
