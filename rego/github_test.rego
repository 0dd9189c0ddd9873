package airlock_test

import data.airlock

test_github_connect_allowed_and_intercepted if {
	every host in ["github.com", "api.github.com", "codeload.github.com", "raw.githubusercontent.com"] {
		d := airlock.decision with input as connect(host, 443)
		d.action == "allow"
		d.rule == "github.connect"
		d.tunnel == false
	}
}

test_github_ssh_port_denied if {
	d := airlock.decision with input as connect("github.com", 22)
	d.action == "deny"
}

test_github_reads_carry_read_credential if {
	every c in [
		["GET", "api.github.com", "/repos/acme/app/issues"],
		["HEAD", "api.github.com", "/repos/acme/app"],
		["GET", "github.com", "/acme/app"],
		["POST", "github.com", "/acme/app.git/git-upload-pack"],
	] {
		d := airlock.decision with input as request(c[0], c[1], c[2])
		d.action == "allow"
		d.rule == "github.read"
		d.credentials == ["github-read"]
		d.reflects == false # GitHub does not echo the token: clones and archives pass unchecked
		not d.upgrade
		d.credential_optional # a fresh install, with no github-read configured, reads anonymously
	}
}

test_github_write_credential_is_not_optional if {
	d := airlock.decision with input as request("POST", "api.github.com", "/repos/acme/app/issues")
	d.action == "approve"
	d.credentials == ["github-write"]
	not d.credential_optional
}

test_git_clone_allowed if {
	inp := request_q("GET", "github.com", "/acme/app.git/info/refs", {"service": ["git-upload-pack"]})
	d := airlock.decision with input as inp
	d.action == "allow"
	d.credentials == ["github-read"]
}

test_github_content_hosts_read_without_credentials if {
	every host in ["codeload.github.com", "raw.githubusercontent.com", "objects.githubusercontent.com"] {
		d := airlock.decision with input as request("GET", host, "/acme/app/main/README.md")
		d.action == "allow"
		d.rule == "github.read"
		d.credentials == []
	}
}

test_github_writes_need_approval if {
	every c in [
		["POST", "api.github.com", "/repos/acme/app/issues"],
		["PATCH", "api.github.com", "/repos/acme/app/pulls/1"],
		["PUT", "api.github.com", "/repos/acme/app/contents/README.md"],
		["DELETE", "api.github.com", "/repos/acme/app"],
		["POST", "api.github.com", "/graphql"],
		["POST", "github.com", "/acme/app.git/git-receive-pack"],
	] {
		d := airlock.decision with input as request(c[0], c[1], c[2])
		d.action == "approve"
		d.rule == "github.write"
		d.credentials == ["github-write"]
		d.approval.timeout == "10m"
		contains(d.reason, "approve")
		d.reflects == false
	}
}

test_git_push_discovery_needs_approval if {
	inp := request_q("GET", "github.com", "/acme/app.git/info/refs", {"service": ["git-receive-pack"]})
	d := airlock.decision with input as inp
	d.action == "approve"
	d.rule == "github.write"
}

test_github_content_hosts_are_read_only if {
	d := airlock.decision with input as request("POST", "codeload.github.com", "/acme/app/tar.gz/main")
	d.action == "deny"
	d.rule == "github.read-only-host"
}

test_github_plain_http_denied if {
	d := airlock.decision with input as plain_http("GET", "api.github.com", "/repos/acme/app")
	d.action == "deny"
	d.rule == "github.plain-http"
	contains(d.reason, "https://api.github.com/repos/acme/app")
}

graphql(op_type, fields) := object.union(request("POST", "api.github.com", "/graphql"), {"request": {
	"body": {"query": "…"},
	"graphql": {"operation_type": op_type, "operation_name": "Op", "root_fields": fields},
}})

test_github_graphql_query_allowed if {
	d := airlock.decision with input as graphql("query", ["repository", "viewer"])
	d.action == "allow"
	d.rule == "github.read"
	d.credentials == ["github-read"]
}

test_github_graphql_mutation_held if {
	d := airlock.decision with input as graphql("mutation", ["closeIssue"])
	d.action == "approve"
	d.rule == "github.write"
	d.credentials == ["github-write"]
}

test_github_graphql_get_mutation_held if {
	inp := object.union(request("GET", "api.github.com", "/graphql"), {"request": {"graphql": {"operation_type": "mutation", "root_fields": ["closeIssue"]}}})
	d := airlock.decision with input as inp
	d.action == "approve"
}
