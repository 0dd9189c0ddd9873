# GitHub, reads allowed and writes held for approval
#
# Hosts in data.hosts.github. Reads (GET, HEAD, and git fetches, which POST to
# git-upload-pack) are allowed; on hosts marked "authenticated" they carry the credential
# "github-read". Writes (any other method, a git push, a GraphQL POST, which may be a
# mutation) on authenticated hosts are held for a human ("approve") and carry
# "github-write" once approved. Other GitHub hosts (archives, raw files, release assets) are
# read-only.
package airlock

github_read_credential := "github-read"

github_write_credential := "github-write"

# How long a held GitHub write waits for a human before it is refused.
github_approval_timeout := "10m"

_github := data.hosts.github[input.request.host]

_needs_credential if _github.authenticated

allow contains _allow(
	"github.connect",
	sprintf("%s is a GitHub host; requests inside are checked one by one", [input.request.host]),
	[],
) if {
	input.phase == "connect"
	_port_ok(_github)
}

allow contains _allow("github.read", sprintf("reading from %s is allowed", [input.request.host]), _github_read_credentials) if {
	input.phase == "request"
	_port_ok(_github)
	_github_read
}

approve contains _approve(
	"github.write",
	sprintf(
		"%s %s%s changes something on GitHub and waits for a human to approve it (up to %s); if it is refused, do not retry, ask the operator",
		[input.request.method, input.request.host, object.get(input.request, "path", "/"), github_approval_timeout],
	),
	[github_write_credential],
	github_approval_timeout,
) if {
	input.phase == "request"
	_port_ok(_github)
	_github.authenticated
	not _github_read
}

deny contains _deny(
	"github.read-only-host",
	sprintf("%s serves GitHub content read-only; %s is refused there, use api.github.com or github.com for changes", [input.request.host, input.request.method]),
) if {
	input.phase == "request"
	_github
	not _github.authenticated
	not _github_read
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
_git_push if "git-receive-pack" in object.get(input.request, ["query", "service"], [])

_git_push if endswith(input.request.path, "/git-receive-pack")
