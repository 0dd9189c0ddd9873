package airlock_test

import data.airlock

registry_hosts := [
	"proxy.golang.org", "sum.golang.org", "pypi.org", "files.pythonhosted.org",
	"registry.npmjs.org", "crates.io", "index.crates.io", "static.crates.io",
	"deb.debian.org", "security.debian.org",
]

test_registries_connect_allowed_on_443 if {
	every host in registry_hosts {
		d := airlock.decision with input as connect(host, 443)
		d.action == "allow"
		d.rule == "registries.connect"
		d.tunnel == false
		d.credentials == []
	}
}

test_registries_other_ports_denied if {
	every c in [["pypi.org", 80], ["proxy.golang.org", 8443], ["registry.npmjs.org", 22]] {
		d := airlock.decision with input as connect(c[0], c[1])
		d.action == "deny"
		d.rule == "default.deny"
	}
}

test_debian_reachable_over_plain_http if {
	d1 := airlock.decision with input as connect("deb.debian.org", 80)
	d1.action == "allow"
	d2 := airlock.decision with input as plain_http("GET", "deb.debian.org", "/debian/dists/bookworm/InRelease")
	d2.action == "allow"
	d2.rule == "registries.read"
}

test_registries_reads_allowed_without_credentials if {
	every c in [
		["GET", "proxy.golang.org", "/golang.org/x/net/@v/list"],
		["HEAD", "proxy.golang.org", "/golang.org/x/net/@v/v0.1.0.zip"],
		["GET", "sum.golang.org", "/lookup/golang.org/x/net@v0.1.0"],
		["GET", "pypi.org", "/simple/requests/"],
		["GET", "files.pythonhosted.org", "/packages/ab/cd/requests-2.0.tar.gz"],
		["GET", "registry.npmjs.org", "/left-pad"],
		["GET", "index.crates.io", "/se/rd/serde"],
		["GET", "static.crates.io", "/crates/serde/serde-1.0.0.crate"],
		["GET", "deb.debian.org", "/debian/pool/main/c/curl/curl.deb"],
	] {
		d := airlock.decision with input as request(c[0], c[1], c[2])
		d.action == "allow"
		d.rule == "registries.read"
		d.credentials == []
		d.reflects == false # packages are compressed archives, downloads may be ranged
	}
}

test_registries_writes_denied if {
	every c in [
		["PUT", "registry.npmjs.org", "/left-pad"],
		["POST", "registry.npmjs.org", "/-/v1/login"],
		["DELETE", "registry.npmjs.org", "/left-pad/-rev/1"],
		["POST", "pypi.org", "/legacy/"],
		["PUT", "crates.io", "/api/v1/crates/new"],
		["PATCH", "proxy.golang.org", "/x"],
		["OPTIONS", "pypi.org", "/simple/"],
	] {
		d := airlock.decision with input as request(c[0], c[1], c[2])
		d.action == "deny"
		d.rule == "registries.read-only"
		contains(d.reason, "only reads")
	}
}

test_npm_audit_post_allowed if {
	every path in ["/-/npm/v1/security/advisories/bulk", "/-/npm/v1/security/audits/quick"] {
		d := airlock.decision with input as request("POST", "registry.npmjs.org", path)
		d.action == "allow"
		d.rule == "registries.read"
	}
}

test_npm_audit_paths_are_npm_only if {
	d := airlock.decision with input as request("POST", "pypi.org", "/-/npm/v1/security/advisories/bulk")
	d.action == "deny"
	d.rule == "registries.read-only"
}

test_registry_list_comes_from_data if {
	hosts := {"mirror.example.com": {"ecosystem": "PyPI mirror"}}
	d := airlock.decision with input as request("GET", "mirror.example.com", "/simple/") with data.hosts.registries as hosts
	d.action == "allow"
	d.rule == "registries.read"
	d2 := airlock.decision with input as request("GET", "pypi.org", "/simple/") with data.hosts.registries as hosts
	d2.action == "deny"
}
