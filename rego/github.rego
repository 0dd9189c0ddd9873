# GitHub: reads allowed, writes held for approval.
#
# Hosts in data.hosts.github. Reads (GET, HEAD, and git fetches, which POST to
# git-upload-pack) are allowed; on hosts marked "authenticated" they carry the credential
# "github-read". Writes (any other method, a git push, a GraphQL POST, which may be a
# mutation) on authenticated hosts are held for a human ("approve") and carry
# "github-write" once approved. Other GitHub hosts (archives, raw files, release assets) are
# read-only. A git push asks twice: for the receive-pack refs and for the pack itself.
package airlock

github_read_credential := "github-read"

github_write_credential := "github-write"

# How long a held GitHub write waits for a human before it is refused.
github_approval_timeout := "10m"

_github := data.hosts.github[input.request.host]

_github_port_ok if input.request.port in object.get(_github, "ports", [443])

allow contains {
	"action": "allow",
	"rule": "github.connect",
	"reason": concat("", [input.request.host, " is a GitHub host; requests inside are checked one by one"]),
	"credentials": [],
	"tunnel": false,
} if {
	input.phase == "connect"
	_github_port_ok
}

allow contains {
	"action": "allow",
	"rule": "github.read",
	"reason": concat("", ["reading from ", input.request.host, " is allowed"]),
	"credentials": _github_read_credentials,
	"tunnel": false,
} if {
	input.phase == "request"
	_github_port_ok
	_github_read
}

approve contains {
	"action": "approve",
	"rule": "github.write",
	"reason": sprintf(
		"%s %s%s is a write to GitHub and waits for a human to approve it (up to %s); if it is refused, do not retry, ask the operator",
		[input.request.method, input.request.host, _path, github_approval_timeout],
	),
	"credentials": [github_write_credential],
	"approval": {"timeout": github_approval_timeout},
} if {
	input.phase == "request"
	_github.authenticated
	_github_port_ok
	not _github_read
}

deny contains {
	"action": "deny",
	"rule": "github.read-only-host",
	"reason": sprintf(
		"%s serves GitHub content read-only; %s is refused there, use api.github.com or github.com for changes",
		[input.request.host, input.request.method],
	),
} if {
	input.phase == "request"
	_github
	not _github.authenticated
	not _github_read
}

deny contains {"action": "deny", "rule": "github.plain-http", "reason": _use_https_reason} if {
	input.phase == "request"
	input.request.scheme == "http"
	_github.authenticated
}

_github_read_credentials := [github_read_credential] if _github.authenticated

else := []

_github_read if {
	input.request.method in read_methods
	not _git_push
}

# A git fetch or clone POSTs its wants to git-upload-pack: that only reads.
_github_read if {
	input.request.method == "POST"
	endswith(input.request.path, "/git-upload-pack")
}

# A git push first asks for the receive-pack refs, then POSTs to git-receive-pack.
_git_push if "git-receive-pack" in input.request.query.service

_git_push if endswith(input.request.path, "/git-receive-pack")
