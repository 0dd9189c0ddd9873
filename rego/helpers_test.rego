package airlock_test

# Inputs in the shape the proxy sends (docs/architecture.md, "The policy contract").

connect(host, port) := {
	"version": 1,
	"phase": "connect",
	"sandbox": {"id": "sbx-test", "labels": {"tenant": "acme"}},
	"request": {"method": "CONNECT", "host": host, "port": port},
}

request(method, host, path) := {
	"version": 1,
	"phase": "request",
	"sandbox": {"id": "sbx-test", "labels": {"tenant": "acme"}},
	"request": {
		"method": method, "scheme": "https", "host": host, "port": 443,
		"path": path, "query": {}, "headers": {"user-agent": ["test"]},
	},
}

# request_q is request with a query string.
request_q(method, host, path, query) := object.union(request(method, host, path), {"request": {"query": query}})

# plain_http is a request over http:// on port 80.
plain_http(method, host, path) := object.union(request(method, host, path), {"request": {"scheme": "http", "port": 80}})

# with_tenant is a request from a sandbox labelled with another tenant.
with_tenant(inp, tenant) := object.union(inp, {"sandbox": {"labels": {"tenant": tenant}}})
