# an internal API reached with a brokered credential
#
# Hosts in data.hosts.internal_api, for example api.internal.example, are reachable only by
# sandboxes whose label "tenant" is one of the entry's "tenants". Every request carries the
# entry's "credential" (the shipped example names "internal-api", which the proxy's
# configuration maps to a Vault path and a header). Reads are allowed; writes are held for
# approval; DELETE is denied.
package airlock

_internal_api := data.hosts.internal_api[input.request.host]

_needs_credential if _internal_api

_tenant_ok if object.get(input.sandbox, ["labels", "tenant"], "") in _internal_api.tenants

allow contains _allow(
	"internal-api.connect",
	sprintf("%s is an internal API this sandbox's tenant may use; requests inside are checked one by one", [input.request.host]),
	[],
) if {
	input.phase == "connect"
	_port_ok(_internal_api)
	_tenant_ok
}

allow contains _allow(
	"internal-api.read",
	sprintf("reading from the internal API %s is allowed", [input.request.host]),
	[_internal_api.credential],
) if {
	input.phase == "request"
	_port_ok(_internal_api)
	_tenant_ok
	input.request.method in read_methods
}

approve contains _approve(
	"internal-api.write",
	sprintf("%s %s%s changes data in an internal API and waits for a human to approve it", [input.request.method, input.request.host, input.request.path]),
	[_internal_api.credential],
	"5m",
) if {
	input.phase == "request"
	_port_ok(_internal_api)
	_tenant_ok
	input.request.method in {"POST", "PUT", "PATCH"}
}

deny contains _deny(
	"internal-api.tenant",
	sprintf(
		"%s is an internal API for tenants %v; this sandbox's tenant label is %q; ask the operator to run it with an allowed tenant",
		[input.request.host, _internal_api.tenants, object.get(input.sandbox, ["labels", "tenant"], "")],
	),
) if {
	_internal_api
	not _tenant_ok
}

deny contains _deny(
	"internal-api.delete",
	sprintf("DELETE on the internal API %s is never allowed from a sandbox; ask the operator to do it", [input.request.host]),
) if {
	input.phase == "request"
	_internal_api
	input.request.method == "DELETE"
}
