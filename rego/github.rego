# GitHub: reads allowed, writes held for approval.
#
# Hosts in data.hosts.github. Reads (GET, HEAD, and git fetches, which POST to
# git-upload-pack) are allowed; on hosts marked "authenticated" they carry the credential
# "github-read" when the proxy's config defines it, and go anonymously when it does not
# ("credential_optional": public repositories read on a fresh install). GraphQL queries
# (api.github.com/graphql, body-aware) are reads too. Writes (any other method, a git push, a
# GraphQL mutation or a GraphQL POST that is not one query) on authenticated hosts are held
# for a human ("approve") and carry
# "github-write" once approved. Other GitHub hosts (archives, raw files, release assets) are
# read-only. A git push asks twice: for the receive-pack refs and for the pack itself.
#
# GitHub does not echo the token it is sent, so these rules declare "reflects": false: responses
# pass without their bodies being checked for it, as a git clone (packfiles) and archive
# downloads (compressed) need.
package airlock

github_read_credential := "github-read"

github_write_credential := "github-write"

# How long a held GitHub write waits for a human before it is refused.
github_approval_timeout := "10m"

allow contains {
	"action": "allow",
	"rule": "github.connect",
	"reason": "a GitHub host: requests inside are checked one by one",
	"credentials": [],
	"tunnel": false,
} if {
	input.phase == "connect"
	data.hosts.github[input.request.host]
	gh := data.hosts.github[input.request.host]
	input.request.port in object.get(gh, "ports", [443])
}

allow contains {
	"action": "allow",
	"rule": "github.read",
	"reason": "reading from GitHub is allowed",
	"credentials": _github_read_credentials(gh),
	"credential_optional": true,
	"tunnel": false,
	"reflects": false,
} if {
	input.phase == "request"
	data.hosts.github[input.request.host]
	gh := data.hosts.github[input.request.host]
	input.request.port in object.get(gh, "ports", [443])
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
	"reflects": false,
} if {
	not _github_read # first: every read enters this rule, and leaves it here
	input.phase == "request"
	data.hosts.github[input.request.host]
	data.hosts.github[input.request.host].authenticated
	input.request.port in object.get(data.hosts.github[input.request.host], "ports", [443])
}

deny contains {
	"action": "deny",
	"rule": "github.read-only-host",
	"reason": sprintf(
		"%s serves GitHub content read-only; %s is refused there, use api.github.com or github.com for changes",
		[input.request.host, input.request.method],
	),
} if {
	not _github_read # first, as in github.write
	input.phase == "request"
	data.hosts.github[input.request.host]
	gh := data.hosts.github[input.request.host]
	not gh.authenticated
}

deny contains {"action": "deny", "rule": "github.plain-http", "reason": _use_https_reason} if {
	input.request.scheme == "http"
	input.phase == "request"
	data.hosts.github[input.request.host]
	data.hosts.github[input.request.host].authenticated
}

_github_read_credentials(gh) := [github_read_credential] if gh.authenticated

else := []

_github_read if {
	input.request.method in {"GET", "HEAD"}
	not _git_push
	not _graphql_write
}

# A GraphQL query only reads. /graphql is body-aware (data.body_aware): the proxy parses the
# body and gives the operation as input.request.graphql; a mutation (or a body it could not
# read as one operation) stays a write.
_github_read if {
	input.request.method == "POST"
	input.request.path == "/graphql"
	input.request.graphql.operation_type == "query"
}

_graphql_write if input.request.graphql.operation_type != "query"

# A git fetch or clone POSTs its wants to git-upload-pack: that only reads.
_github_read if {
	input.request.method == "POST"
	endswith(input.request.path, "/git-upload-pack")
}

# A git push first asks for the receive-pack refs, then POSTs to git-receive-pack.
_git_push if "git-receive-pack" in input.request.query.service

_git_push if endswith(input.request.path, "/git-receive-pack")
