package airlock_test

import data.airlock

test_internal_api_connect_for_allowed_tenant if {
	d := airlock.decision with input as connect("api.internal.example", 443)
	d.action == "allow"
	d.rule == "internal-api.connect"
	d.credentials == []
}

test_internal_api_read_carries_credential if {
	every m in ["GET", "HEAD"] {
		d := airlock.decision with input as request(m, "api.internal.example", "/v1/items")
		d.action == "allow"
		d.rule == "internal-api.read"
		d.credentials == ["internal-api"]
		not "reflects" in object.keys(d) # may echo: responses are checked for the credential
		not "upgrade" in object.keys(d)
	}
}

test_internal_api_writes_need_approval if {
	every m in ["POST", "PUT", "PATCH"] {
		d := airlock.decision with input as request(m, "api.internal.example", "/v1/items")
		d.action == "approve"
		d.rule == "internal-api.write"
		d.credentials == ["internal-api"]
		d.approval.timeout == "5m"
	}
}

test_internal_api_delete_denied if {
	d := airlock.decision with input as request("DELETE", "api.internal.example", "/v1/items/1")
	d.action == "deny"
	d.rule == "internal-api.delete"
}

test_internal_api_other_methods_denied if {
	d := airlock.decision with input as request("OPTIONS", "api.internal.example", "/v1/items")
	d.action == "deny"
	d.rule == "default.deny"
}

test_internal_api_other_tenant_denied_in_both_phases if {
	every inp in [
		with_tenant(connect("api.internal.example", 443), "globex"),
		with_tenant(request("GET", "api.internal.example", "/v1/items"), "globex"),
		with_tenant(request("POST", "api.internal.example", "/v1/items"), ""),
	] {
		d := airlock.decision with input as inp
		d.action == "deny"
		d.rule == "internal-api.tenant"
		contains(d.reason, "tenant")
	}
}

test_internal_api_unlabelled_sandbox_denied if {
	inp := object.remove(request("GET", "api.internal.example", "/v1/items"), ["sandbox"])
	d := airlock.decision with input as inp
	d.action == "deny"
	d.rule == "internal-api.tenant"
}

test_internal_api_plain_http_denied if {
	d := airlock.decision with input as plain_http("GET", "api.internal.example", "/v1/items")
	d.action == "deny"
	d.rule == "internal-api.plain-http"
}
