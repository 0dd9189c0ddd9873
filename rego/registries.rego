# package registries, read-only
#
# Hosts in data.hosts.registries (Go module proxy and checksum database, PyPI, npm,
# crates.io, Debian) may be read with GET and HEAD, without credentials. An entry may list
# "ports" (default [443]) and "read_posts": paths where a POST only queries (npm audit).
# Anything else sent to a registry, such as publishing a package, is denied.
package airlock

_registry := data.hosts.registries[input.request.host]

allow contains _allow(
	"registries.connect",
	sprintf("%s is a package registry (%s); requests inside are checked one by one", [input.request.host, _registry.ecosystem]),
	[],
) if {
	input.phase == "connect"
	_port_ok(_registry)
}

allow contains _allow(
	"registries.read",
	sprintf("reading from the %s package registry %s is allowed", [_registry.ecosystem, input.request.host]),
	[],
) if {
	input.phase == "request"
	_port_ok(_registry)
	_registry_read
}

deny contains _deny(
	"registries.read-only",
	sprintf(
		"%s is a package registry and airlock allows only reads (GET, HEAD) there; %s %s is refused, and publishing from this sandbox is not possible",
		[input.request.host, input.request.method, object.get(input.request, "path", "/")],
	),
) if {
	input.phase == "request"
	_registry
	not _registry_read
}

_registry_read if input.request.method in read_methods

_registry_read if {
	input.request.method == "POST"
	input.request.path in object.get(_registry, "read_posts", [])
}
