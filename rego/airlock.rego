# METADATA
# title: airlock base policy
# description: |
#   The proxy asks data.airlock.decision for every CONNECT ("connect" phase: method, host and
#   port only) and every HTTP request ("request" phase: method, scheme, host, port, path, query,
#   headers). The other files of this package add decisions to the sets deny, approve and
#   allow; the strictest wins: any deny beats any approve, which beats any allow. When no rule
#   matches, the request is denied (default.deny). See DESIGN.md, "Policy contract".
package airlock

# decision is the one document the proxy reads.
decision := _pick(deny) if {
	count(deny) > 0
} else := _pick(approve) if {
	count(approve) > 0
} else := _pick(allow) if {
	count(allow) > 0
} else := _deny("default.deny", _default_reason)

# _pick chooses one decision deterministically when several rules of the same action match.
_pick(decisions) := sort(decisions)[0]

# Request methods that read and never change anything upstream.
read_methods := {"GET", "HEAD"}

# The input schema this policy was written for.
deny contains _deny(
	"input.version",
	sprintf("airlock policy expects input version 1, got %v; upgrade the policy or the proxy", [input.version]),
) if {
	input.version != 1
}

# Credentials are never sent over plain HTTP: any host that needs one is reached over https.
deny contains _deny(
	"insecure.plain-http",
	sprintf(
		"%s needs a credential and airlock sends credentials only over https; use https://%s%s",
		[input.request.host, input.request.host, object.get(input.request, "path", "/")],
	),
) if {
	input.phase == "request"
	input.request.scheme != "https"
	_needs_credential
}

_default_reason := sprintf(
	"%s port %v is not on any allowlist of the airlock policy; ask the operator to add it to the policy",
	[input.request.host, input.request.port],
) if {
	input.request.host
} else := "no rule of the airlock policy allows this request; ask the operator to add it to the policy"

# _port_ok holds when the request's port is one the host entry allows (443 unless it lists ports).
_port_ok(entry) if input.request.port in object.get(entry, "ports", [443])

_deny(rule, reason) := {"action": "deny", "rule": rule, "reason": reason}

_allow(rule, reason, credentials) := {
	"action": "allow",
	"rule": rule,
	"reason": reason,
	"credentials": credentials,
	"tunnel": false,
}

_approve(rule, reason, credentials, timeout) := {
	"action": "approve",
	"rule": rule,
	"reason": reason,
	"credentials": credentials,
	"approval": {"timeout": timeout},
}
