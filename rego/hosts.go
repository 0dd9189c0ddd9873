package rego

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// HostsKey is the data document of host lists: data.hosts.<list>[<host>] is a host's entry
// in a list, keyed by the host as the policy input has it (lower case, no trailing dot).
const HostsKey = "hosts"

// shippedLists are the host lists the shipped rules read. Their entries are objects (the
// host's settings, {} for none): a rule tests membership with the bare entry,
// data.hosts.<list>[input.request.host], which OPA's rule index reads, and an entry that is
// false or null would make that test fail and the host's rules silently not apply, leaving
// the decision to whatever other list holds the host. Lists of a policy's own (custom rules
// may key hosts to true) are not checked.
var shippedLists = []string{"registries", "github", "internal_api", "mcp", "tunnel"}

// checkHostLists reads data.hosts. A document of another shape in a list the shipped rules
// read is an error naming the entry at fault, so a mistyped entry does not load and change
// decisions; the last good policy stays in force.
func checkHostLists(data map[string]any) error {
	raw, ok := data[HostsKey]
	if !ok {
		return nil
	}
	lists, ok := raw.(map[string]any)
	if !ok {
		return fmt.Errorf("data.%s is %s, want an object of host lists such as {\"github\": {\"github.com\": {}}}", HostsKey, kindOf(raw))
	}
	for _, name := range slices.Sorted(maps.Keys(lists)) {
		if !slices.Contains(shippedLists, name) {
			continue
		}
		list, ok := lists[name].(map[string]any)
		if !ok {
			return fmt.Errorf("data.%s.%s is %s, want an object keyed by host such as {\"example.com\": {}}", HostsKey, name, kindOf(lists[name]))
		}
		for host, v := range list {
			if host == "" || host != strings.ToLower(strings.TrimSuffix(host, ".")) {
				return fmt.Errorf("data.%s.%s: host %q must be lower case without a trailing dot, as the policy input has it", HostsKey, name, host)
			}
			if _, ok := v.(map[string]any); !ok {
				return fmt.Errorf("data.%s.%s[%q] is %s, want an object of the host's settings ({} for none); the shipped rules skip a host whose entry is not an object", HostsKey, name, host, kindOf(v))
			}
		}
	}
	return nil
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
