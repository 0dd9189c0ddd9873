package airlock_test

import data.airlock

mcp_host := "mcp.internal.example"

# mcp_call is a POST to the example MCP endpoint holding one JSON-RPC message and its view,
# as the proxy builds them for a body-aware destination.
mcp_call(msg, view) := object.union(request("POST", mcp_host, "/mcp"), {"request": {"body": msg, "mcp": view}})

tool_call(name, args) := mcp_call(
	{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": args}},
	{"method": "tools/call", "tool": name, "arguments": args, "id": 1},
)

test_mcp_connect_allowed if {
	d := airlock.decision with input as connect(mcp_host, 443)
	d.action == "allow"
	d.rule == "mcp.connect"
}

test_mcp_read_tool_allowed if {
	d := airlock.decision with input as tool_call("search_issues", {"q": "bug"})
	d.action == "allow"
	d.rule == "mcp.read-tool"
}

test_mcp_write_tool_held if {
	d := airlock.decision with input as tool_call("update_issue", {"id": 12, "state": "closed"})
	d.action == "approve"
	d.rule == "mcp.write-tool"
	contains(d.reason, "update_issue")
	d.approval.timeout == "10m"
}

test_mcp_protocol_allowed if {
	every c in [
		[{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}, {"method": "initialize", "id": 0}],
		[{"jsonrpc": "2.0", "method": "notifications/initialized"}, {"method": "notifications/initialized"}],
		[{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, {"method": "tools/list", "id": 2}],
		[{"jsonrpc": "2.0", "id": 3, "result": {}}, {"id": 3}],
	] {
		d := airlock.decision with input as mcp_call(c[0], c[1])
		d.action == "allow"
		d.rule == "mcp.protocol"
	}
}

test_mcp_unknown_method_held if {
	d := airlock.decision with input as mcp_call({"jsonrpc": "2.0", "id": 4, "method": "resources/subscribe"}, {"method": "resources/subscribe", "id": 4})
	d.action == "approve"
	d.rule == "mcp.other-method"
}

test_mcp_post_without_jsonrpc_denied if {
	d := airlock.decision with input as request("POST", mcp_host, "/mcp")
	d.action == "deny"
	d.rule == "mcp.not-jsonrpc"
}

test_mcp_stream_and_session_end_allowed if {
	every m in ["GET", "DELETE"] {
		d := airlock.decision with input as request(m, mcp_host, "/mcp")
		d.action == "allow"
		d.rule == "mcp.session"
	}
}

test_mcp_other_paths_and_methods_denied if {
	d1 := airlock.decision with input as request("GET", mcp_host, "/admin")
	d1.rule == "mcp.path"
	d2 := airlock.decision with input as request("PUT", mcp_host, "/mcp")
	d2.action == "deny"
}

test_mcp_endpoint_is_body_aware if {
	"/mcp" in data.body_aware[mcp_host]
	"/graphql" in data.body_aware["api.github.com"]
}
