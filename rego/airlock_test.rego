package airlock_test

import data.airlock

test_unknown_host_denied_in_both_phases if {
	every inp in [
		connect("evil.example.com", 443),
		request("GET", "evil.example.com", "/"),
		request("GET", "pypi.org.evil.example.com", "/simple/"),
	] {
		d := airlock.decision with input as inp
		d.action == "deny"
		d.rule == "default.deny"
		contains(d.reason, "is not on any allowlist")
		contains(d.reason, "ask the operator")
	}
}

test_default_deny_names_host_and_port if {
	d := airlock.decision with input as connect("evil.example.com", 8443)
	d.reason == "evil.example.com port 8443 is not on any allowlist of the airlock policy; ask the operator to add it to the policy"
}

test_default_deny_without_host if {
	d := airlock.decision with input as {"version": 1, "phase": "request", "request": {}}
	d.action == "deny"
	d.rule == "default.deny"
}

test_unknown_input_version_denied if {
	inp := object.union(request("GET", "pypi.org", "/simple/"), {"version": 2})
	d := airlock.decision with input as inp
	d.action == "deny"
	d.rule == "input.version"
}

test_unknown_phase_denied if {
	inp := object.union(request("GET", "pypi.org", "/simple/"), {"phase": "response"})
	d := airlock.decision with input as inp
	d.action == "deny"
	d.rule == "default.deny"
}

test_deny_beats_approve_beats_allow if {
	a := {"action": "allow", "rule": "t.allow"}
	p := {"action": "approve", "rule": "t.approve"}
	n := {"action": "deny", "rule": "t.deny"}
	d1 := airlock.decision with airlock.allow as {a} with airlock.approve as {p} with airlock.deny as {n}
	d1.rule == "t.deny"
	d2 := airlock.decision with airlock.allow as {a} with airlock.approve as {p} with airlock.deny as set()
	d2.rule == "t.approve"
	d3 := airlock.decision with airlock.allow as {a} with airlock.approve as set() with airlock.deny as set()
	d3.rule == "t.allow"
}

test_several_matches_pick_one_deterministically if {
	d := airlock.decision with airlock.deny as {{"action": "deny", "rule": "b"}, {"action": "deny", "rule": "a"}}
	d.rule == "a"
}

# Every decision of the shipped policy names its rule and explains itself.
test_every_decision_has_rule_and_reason if {
	every inp in [
		connect("pypi.org", 443),
		connect("github.com", 443),
		connect("api.internal.example", 443),
		connect("evil.example.com", 443),
		request("GET", "pypi.org", "/simple/"),
		request("PUT", "pypi.org", "/simple/"),
		request("GET", "api.github.com", "/repos/acme/app"),
		request("POST", "api.github.com", "/repos/acme/app/issues"),
		request("POST", "codeload.github.com", "/x"),
		request("GET", "api.internal.example", "/v1/items"),
		request("DELETE", "api.internal.example", "/v1/items/1"),
		plain_http("GET", "api.github.com", "/"),
	] {
		d := airlock.decision with input as inp
		d.action in {"allow", "deny", "approve"}
		regex.match(`^[a-z-]+\.[a-z-]+$`, d.rule)
		count(d.reason) > 20
	}
}
