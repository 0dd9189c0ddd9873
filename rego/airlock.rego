# METADATA
# title: airlock base policy
# description: |
#   The proxy asks data.airlock.decision for every CONNECT ("connect" phase: method, host and
#   port only) and every HTTP request ("request" phase: method, scheme, host, port, path, query,
#   headers). The other files of this package add decision objects to the sets deny, approve
#   and allow; the strictest wins: any deny beats any approve, which beats any allow. When no
#   rule matches, the request is denied (default.deny). See docs/architecture.md, "The policy contract".
#
#   A decision is {"action": "allow"|"deny"|"approve", "rule": ..., "reason": ...,
#   "credentials": [...], "tunnel": bool, "approval": {"timeout": "10m"}, "reflects": bool,
#   "upgrade": bool}. The reason is shown to the agent in the sandbox: say what was refused
#   and what to do. "reflects": false declares that the destination never echoes the
#   credentials (responses then pass unchecked); "upgrade": true lets a request with
#   credentials switch protocols (WebSocket), and needs "reflects": false.
package airlock

# decision is the one document the proxy reads. When several rules of the winning action
# match, the smallest decision (by OPA's ordering) is taken, so the answer is deterministic.
decision := d if {
	d := min(deny)
} else := d if {
	d := min(approve)
} else := d if {
	d := min(allow)
} else := {
	"action": "deny",
	"rule": "default.deny",
	"reason": _default_reason,
}

# Performance: OPA's rule index decides which rules of deny, approve and allow a request
# enters, from what a rule's body states plainly: equalities of input.phase and
# input.request.method with constants, and a bare membership test of the host in its list,
# data.hosts.<list>[input.request.host], written on its own line before anything is bound
# from the entry (`gh := data.hosts.github[...]` alone is not indexed). A request to a
# registry thus enters only registry rules, whatever the size of the other lists. Rules use
# helper rules only after the host has matched. The reasons of allow rules are constants:
# the audit record already carries the host, method and path beside the rule, and building
# a string (concat, sprintf) is about a sixth of an evaluation the decision cache has not
# seen. Deny and approve reasons, which the agent and the approver read, name what was asked.

# The input schema this policy was written for.
deny contains {
	"action": "deny",
	"rule": "input.version",
	"reason": sprintf("airlock policy expects input version 1, got %v; upgrade the policy or the proxy", [input.version]),
} if {
	input.version != 1
}

_default_reason := sprintf(
	"%s port %v is not on any allowlist of the airlock policy; ask the operator to add it to the policy",
	[input.request.host, input.request.port],
) if {
	input.request.host
} else := "no rule of the airlock policy allows this request; ask the operator to add it to the policy"

# The request's path; "/" when it has none (connect phase).
default _path := "/"

_path := input.request.path

# Credentials are never sent over plain HTTP: rules for hosts that need one add a deny for
# scheme "http" that points at https, using this reason.
_use_https_reason := sprintf(
	"%s needs a credential and airlock sends credentials only over https; use https://%s%s",
	[input.request.host, input.request.host, _path],
)

# The exec phase: a command about to run in a sandbox session ({"argv", "cwd", "env"}: env
# holds the names of the variables the command adds, never their values). The shipped
# policy allows every command; deny or approve rules for this phase hold or refuse
# commands (see the example in exec_test.rego). A denied command fails with the reason on
# its stderr; an approved one waits in the approval flow, where the approver sees the argv.
allow contains {
	"action": "allow",
	"rule": "exec.default",
	"reason": "the shipped policy allows every command in a sandbox",
} if {
	input.phase == "exec"
}
