package rego

import "github.com/open-policy-agent/opa/v1/ast"

// OPA looks strings up in a table of interned terms before it allocates one: every key of
// a data path it reads from the store (data.hosts.registries[host] reads "hosts" and
// "registries"), and every string the input builder puts in the input. The strings every
// evaluation meets are interned here, at package initialisation (OPA's table may only be
// written then): the input's keys and fixed values, the decision's keys, and the keys of
// the shipped data.json. A policy with other keys works the same, with an allocation more
// per read.
func init() {
	ast.InternStringTerm(
		// The input (docs/architecture.md, "The policy contract").
		"phase", "connect", "request", "exec", "sandbox", "id", "host", "argv", "cwd",
		"mcp", "tool", "arguments", "graphql", "operation_type", "operation_name", "root_fields",
		"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "http", "https",
		"query", "mutation", "subscription",
		// The decision.
		"action", "allow", "deny", "approve", "reason", "credentials", "tunnel", "approval",
		"timeout", "reflects", "upgrade",
		// The shipped data.json.
		"hosts", "registries", "github", "internal_api", "body_aware", "ports", "credential",
		"ecosystem", "read_posts", "read_tools", "authenticated", "tenants",
	)
}
