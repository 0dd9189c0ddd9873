# MCP servers: tools that read are allowed, tools that write wait for a human.
#
# Hosts in data.hosts.mcp, each with the "path" of its streamable HTTP endpoint and the
# "read_tools" it may call freely. The endpoint must also be listed in data.body_aware so
# that the proxy parses request bodies there: input.request.mcp is then the JSON-RPC 2.0
# message ({"method", "tool", "arguments", "id"}), and a JSON-RPC batch is decided call by
# call (the strictest decision wins).
#
# - GET (the server's SSE stream) and DELETE (end of session) on the endpoint: allowed.
# - Protocol messages (initialize, server/discover, ping, the list and read methods, notifications) and
#   responses to the server's own requests: allowed.
# - tools/call of a tool in read_tools: allowed (mcp.read-tool); of any other tool: held
#   for approval (mcp.write-tool), the approver sees the tool and its arguments.
# - Any other JSON-RPC method: held (mcp.other-method). A POST that is not JSON-RPC: denied.
package airlock

# How long a held MCP tool call waits for a human before it is refused.
mcp_approval_timeout := "10m"

# JSON-RPC methods that only read or manage the session.
mcp_protocol_methods := {
	"initialize", "server/discover", "ping",
	"tools/list", "resources/list", "resources/templates/list", "resources/read",
	"prompts/list", "prompts/get", "completion/complete", "logging/setLevel",
}

allow contains {
	"action": "allow",
	"rule": "mcp.connect",
	"reason": "an MCP server: its tool calls are checked one by one",
	"credentials": [],
	"tunnel": false,
} if {
	input.phase == "connect"
	data.hosts.mcp[input.request.host]
	srv := data.hosts.mcp[input.request.host]
	input.request.port in object.get(srv, "ports", [443])
}

allow contains {
	"action": "allow",
	"rule": "mcp.session",
	"reason": "the MCP event stream and session end are allowed",
	"credentials": _mcp_credentials,
} if {
	input.phase == "request"
	input.request.method in {"GET", "DELETE"}
	data.hosts.mcp[input.request.host]
	_mcp_endpoint
}

allow contains {
	"action": "allow",
	"rule": "mcp.protocol",
	"reason": concat("", ["MCP ", _mcp_method_name, " only reads"]),
	"credentials": _mcp_credentials,
} if {
	input.phase == "request"
	input.request.method == "POST"
	data.hosts.mcp[input.request.host]
	_mcp_endpoint
	_mcp_protocol
}

allow contains {
	"action": "allow",
	"rule": "mcp.read-tool",
	"reason": concat("", ["the MCP tool ", input.request.mcp.tool, " only reads"]),
	"credentials": _mcp_credentials,
} if {
	input.phase == "request"
	input.request.method == "POST"
	data.hosts.mcp[input.request.host]
	input.request.mcp.method == "tools/call"
	_mcp_endpoint
	input.request.mcp.tool in object.get(data.hosts.mcp[input.request.host], "read_tools", [])
}

approve contains {
	"action": "approve",
	"rule": "mcp.write-tool",
	"reason": sprintf(
		"the MCP tool %s on %s may change things and waits for a human to approve it (up to %s); if it is refused, do not retry, ask the operator",
		[input.request.mcp.tool, input.request.host, mcp_approval_timeout],
	),
	"credentials": _mcp_credentials,
	"approval": {"timeout": mcp_approval_timeout},
} if {
	input.phase == "request"
	input.request.method == "POST"
	data.hosts.mcp[input.request.host]
	input.request.mcp.method == "tools/call"
	_mcp_endpoint
	not input.request.mcp.tool in object.get(data.hosts.mcp[input.request.host], "read_tools", [])
}

approve contains {
	"action": "approve",
	"rule": "mcp.other-method",
	"reason": sprintf("the MCP method %s is not known to only read, so it waits for a human to approve it", [input.request.mcp.method]),
	"credentials": _mcp_credentials,
	"approval": {"timeout": mcp_approval_timeout},
} if {
	input.phase == "request"
	input.request.method == "POST"
	data.hosts.mcp[input.request.host]
	_mcp_endpoint
	input.request.mcp.method != "tools/call"
	not _mcp_protocol
}

deny contains {
	"action": "deny",
	"rule": "mcp.not-jsonrpc",
	"reason": sprintf("%s%s takes JSON-RPC 2.0 messages (MCP) only; send one as application/json", [input.request.host, _path]),
} if {
	input.phase == "request"
	input.request.method == "POST"
	data.hosts.mcp[input.request.host]
	_mcp_endpoint
	not input.request.mcp
}

deny contains {
	"action": "deny",
	"rule": "mcp.method",
	"reason": sprintf("%s is refused on the MCP endpoint %s%s; use GET, POST or DELETE", [input.request.method, input.request.host, _path]),
} if {
	input.phase == "request"
	data.hosts.mcp[input.request.host]
	not input.request.method in {"GET", "POST", "DELETE"}
	_mcp_endpoint
}

deny contains {
	"action": "deny",
	"rule": "mcp.path",
	"reason": sprintf("%s serves MCP at %s only", [input.request.host, data.hosts.mcp[input.request.host].path]),
} if {
	input.phase == "request"
	data.hosts.mcp[input.request.host]
	not _mcp_endpoint
}

_mcp_endpoint if {
	srv := data.hosts.mcp[input.request.host]
	input.request.port in object.get(srv, "ports", [443])
	input.request.path == srv.path
}

# A protocol method, a notification, or a response (no method) to the server's request.
_mcp_protocol if input.request.mcp.method in mcp_protocol_methods

_mcp_protocol if startswith(input.request.mcp.method, "notifications/")

_mcp_protocol if {
	input.request.mcp
	not input.request.mcp.method
}

_mcp_method_name := input.request.mcp.method

_mcp_method_name := "response" if not input.request.mcp.method

_mcp_credentials := [c] if {
	c := data.hosts.mcp[input.request.host].credential
} else := []
