# An internal API reached with a brokered credential.
#
# Hosts in data.hosts.internal_api, for example api.internal.example, are reachable only by
# sandboxes whose label "tenant" is one of the entry's "tenants". Every request carries the
# entry's "credential" (the shipped example names "internal-api", which the proxy's
# configuration maps to a Vault path and a header). Reads are allowed; POST, PUT and PATCH
# are held for approval; DELETE is denied; other methods fall to the default deny.
package airlock

_internal_api := data.hosts.internal_api[input.request.host]

_internal_api_port_ok if input.request.port in object.get(_internal_api, "ports", [443])

# The sandbox's tenant label; "" when it has none.
default _tenant := ""

_tenant := input.sandbox.labels.tenant

_tenant_ok if _tenant in _internal_api.tenants

allow contains {
	"action": "allow",
	"rule": "internal-api.connect",
	"reason": concat("", [input.request.host, " is an internal API this sandbox's tenant may use; requests inside are checked one by one"]),
	"credentials": [],
	"tunnel": false,
} if {
	input.phase == "connect"
	_internal_api_port_ok
	_tenant_ok
}

allow contains {
	"action": "allow",
	"rule": "internal-api.read",
	"reason": concat("", ["reading from the internal API ", input.request.host, " is allowed"]),
	"credentials": [_internal_api.credential],
	"tunnel": false,
} if {
	input.phase == "request"
	_internal_api_port_ok
	_tenant_ok
	input.request.method in read_methods
}

approve contains {
	"action": "approve",
	"rule": "internal-api.write",
	"reason": sprintf(
		"%s %s%s changes data in an internal API and waits for a human to approve it",
		[input.request.method, input.request.host, _path],
	),
	"credentials": [_internal_api.credential],
	"approval": {"timeout": "5m"},
} if {
	input.phase == "request"
	_internal_api_port_ok
	_tenant_ok
	input.request.method in {"POST", "PUT", "PATCH"}
}

deny contains {
	"action": "deny",
	"rule": "internal-api.tenant",
	"reason": sprintf(
		"%s is an internal API for tenants %v; this sandbox's tenant label is %q; ask the operator to run it with an allowed tenant",
		[input.request.host, _internal_api.tenants, _tenant],
	),
} if {
	_internal_api
	not _tenant_ok
}

deny contains {
	"action": "deny",
	"rule": "internal-api.delete",
	"reason": concat("", ["DELETE on the internal API ", input.request.host, " is never allowed from a sandbox; ask the operator to do it"]),
} if {
	input.request.method == "DELETE"
	_internal_api
}

deny contains {"action": "deny", "rule": "internal-api.plain-http", "reason": _use_https_reason} if {
	input.phase == "request"
	input.request.scheme == "http"
	_internal_api
}
