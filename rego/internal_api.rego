# An internal API reached with a brokered credential.
#
# Hosts in data.hosts.internal_api, for example api.internal.example, are reachable only by
# sandboxes whose label "tenant" is one of the entry's "tenants". Every request carries the
# entry's "credential" (the shipped example names "internal-api", which the proxy's
# configuration maps to a Vault path and a header). Reads are allowed; POST, PUT and PATCH
# are held for approval; DELETE is denied; other methods fall to the default deny.
package airlock

# The sandbox's tenant label; "" when it has none.
default _tenant := ""

_tenant := input.sandbox.labels.tenant

allow contains {
	"action": "allow",
	"rule": "internal-api.connect",
	"reason": "an internal API this sandbox's tenant may use: requests inside are checked one by one",
	"credentials": [],
	"tunnel": false,
} if {
	input.phase == "connect"
	data.hosts.internal_api[input.request.host]
	api := data.hosts.internal_api[input.request.host]
	input.request.port in object.get(api, "ports", [443])
	_tenant in api.tenants
}

allow contains {
	"action": "allow",
	"rule": "internal-api.read",
	"reason": "reading from an internal API is allowed",
	"credentials": [api.credential],
	"tunnel": false,
} if {
	input.phase == "request"
	data.hosts.internal_api[input.request.host]
	api := data.hosts.internal_api[input.request.host]
	input.request.method in {"GET", "HEAD"}
	input.request.port in object.get(api, "ports", [443])
	_tenant in api.tenants
}

approve contains {
	"action": "approve",
	"rule": "internal-api.write",
	"reason": sprintf(
		"%s %s%s changes data in an internal API and waits for a human to approve it",
		[input.request.method, input.request.host, _path],
	),
	"credentials": [api.credential],
	"approval": {"timeout": "5m"},
} if {
	input.phase == "request"
	data.hosts.internal_api[input.request.host]
	api := data.hosts.internal_api[input.request.host]
	input.request.method in {"POST", "PUT", "PATCH"}
	input.request.port in object.get(api, "ports", [443])
	_tenant in api.tenants
}

deny contains {
	"action": "deny",
	"rule": "internal-api.tenant",
	"reason": sprintf(
		"%s is an internal API for tenants %v; this sandbox's tenant label is %q; ask the operator to run it with an allowed tenant",
		[input.request.host, api.tenants, _tenant],
	),
} if {
	data.hosts.internal_api[input.request.host]
	api := data.hosts.internal_api[input.request.host]
	not _tenant in api.tenants
}

deny contains {
	"action": "deny",
	"rule": "internal-api.delete",
	"reason": concat("", ["DELETE on the internal API ", input.request.host, " is never allowed from a sandbox; ask the operator to do it"]),
} if {
	input.request.method == "DELETE"
	data.hosts.internal_api[input.request.host]
}

deny contains {"action": "deny", "rule": "internal-api.plain-http", "reason": _use_https_reason} if {
	input.request.scheme == "http"
	input.phase == "request"
	data.hosts.internal_api[input.request.host]
}
