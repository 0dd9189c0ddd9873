# Package registries, read-only.
#
# Hosts in data.hosts.registries (Go module proxy and checksum database, PyPI, npm,
# crates.io, Debian) may be read with GET and HEAD, without credentials. An entry may list
# "ports" (default [443]) and "read_posts": paths where a POST only queries (npm audit).
# Anything else sent to a registry, such as publishing a package, is denied.
#
# Registries do not echo credentials (a private mirror given one through "credentials" would
# not either), so reads declare "reflects": false: packages, which are compressed archives,
# and ranged downloads pass unchecked.
package airlock

allow contains {
	"action": "allow",
	"rule": "registries.connect",
	"reason": "a package registry: requests inside are checked one by one",
	"credentials": [],
	"tunnel": false,
} if {
	input.phase == "connect"
	data.hosts.registries[input.request.host]
	registry := data.hosts.registries[input.request.host]
	input.request.port in object.get(registry, "ports", [443])
}

# A read is GET or HEAD, one rule each: the rule index then picks the rule by the method
# without a call to test it.
allow contains {
	"action": "allow",
	"rule": "registries.read",
	"reason": "reading from a package registry is allowed",
	"credentials": [],
	"tunnel": false,
	"reflects": false,
} if {
	input.phase == "request"
	input.request.method == "GET"
	data.hosts.registries[input.request.host]
	registry := data.hosts.registries[input.request.host]
	input.request.port in object.get(registry, "ports", [443])
}

allow contains {
	"action": "allow",
	"rule": "registries.read",
	"reason": "reading from a package registry is allowed",
	"credentials": [],
	"tunnel": false,
	"reflects": false,
} if {
	input.phase == "request"
	input.request.method == "HEAD"
	data.hosts.registries[input.request.host]
	registry := data.hosts.registries[input.request.host]
	input.request.port in object.get(registry, "ports", [443])
}

allow contains {
	"action": "allow",
	"rule": "registries.read",
	"reason": "reading from a package registry is allowed",
	"credentials": [],
	"tunnel": false,
	"reflects": false,
} if {
	input.request.method == "POST"
	input.phase == "request"
	data.hosts.registries[input.request.host]
	registry := data.hosts.registries[input.request.host]
	input.request.port in object.get(registry, "ports", [443])
	_registry_read_post(registry)
}

deny contains {
	"action": "deny",
	"rule": "registries.read-only",
	"reason": sprintf(
		"%s is a package registry and airlock allows only reads (GET, HEAD) there; %s %s is refused, and publishing from this sandbox is not possible",
		[input.request.host, input.request.method, _path],
	),
} if {
	# First: every read enters this rule (the index cannot exclude a rule by a negation),
	# and this is where a read leaves it.
	not input.request.method in {"GET", "HEAD"}
	input.phase == "request"
	data.hosts.registries[input.request.host]
	registry := data.hosts.registries[input.request.host]
	not _registry_read_post(registry)
}

# A POST that only queries, such as npm audit.
_registry_read_post(registry) if {
	input.request.method == "POST"
	input.request.path in object.get(registry, "read_posts", [])
}
