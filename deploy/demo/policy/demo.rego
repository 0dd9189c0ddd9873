# Policy of the dashboard demo (deploy/demo/run.sh): reads of the local upstream pass, one
# path needs a Vault credential, writes wait for approval, everything else is denied.
package airlock

default decision := {"action": "deny", "rule": "default.deny", "reason": "not on the demo allowlist"}

decision := {"action": "allow", "rule": "demo.connect", "reason": "demo upstream"} if {
	input.phase == "connect"
	input.request.host == "127.0.0.1"
}

decision := {"action": "allow", "rule": "demo.read", "reason": "reads of the demo upstream"} if {
	input.phase == "request"
	input.request.host == "127.0.0.1"
	input.request.method == "GET"
	not startswith(input.request.path, "/cred")
}

decision := {"action": "allow", "rule": "demo.cred", "reason": "needs the demo credential", "credentials": ["vault-demo"]} if {
	input.phase == "request"
	input.request.host == "127.0.0.1"
	input.request.method == "GET"
	startswith(input.request.path, "/cred")
}

decision := {"action": "approve", "rule": "demo.write", "reason": "writes need a human", "approval": {"timeout": "15s"}} if {
	input.phase == "request"
	input.request.host == "127.0.0.1"
	input.request.method == "PUT"
}
