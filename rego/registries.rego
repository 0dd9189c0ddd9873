# Package registries, read-only.
#
# Hosts in data.hosts.registries (Go module proxy and checksum database, PyPI, npm,
# crates.io, Debian) may be read with GET and HEAD, without credentials. An entry may list
# "ports" (default [443]) and "read_posts": paths where a POST only queries (npm audit).
# Anything else sent to a registry, such as publishing a package, is denied.
package airlock

_registry := data.hosts.registries[input.request.host]

_registry_port_ok if input.request.port in object.get(_registry, "ports", [443])

allow contains {
	"action": "allow",
	"rule": "registries.connect",
	"reason": concat("", [input.request.host, " is a package registry (", _registry.ecosystem, "); requests inside are checked one by one"]),
	"credentials": [],
	"tunnel": false,
} if {
	input.phase == "connect"
	_registry_port_ok
}

allow contains {
	"action": "allow",
	"rule": "registries.read",
	"reason": concat("", ["reading from the ", _registry.ecosystem, " package registry ", input.request.host, " is allowed"]),
	"credentials": [],
	"tunnel": false,
} if {
	input.phase == "request"
	_registry_port_ok
	_registry_read
}

deny contains {
	"action": "deny",
	"rule": "registries.read-only",
	"reason": sprintf(
		"%s is a package registry and airlock allows only reads (GET, HEAD) there; %s %s is refused, and publishing from this sandbox is not possible",
		[input.request.host, input.request.method, _path],
	),
} if {
	input.phase == "request"
	_registry
	not _registry_read
}

_registry_read if input.request.method in read_methods

_registry_read if {
	input.request.method == "POST"
	input.request.path in object.get(_registry, "read_posts", [])
}
