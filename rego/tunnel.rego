# Pass-through tunnels for certificate-pinned clients.
#
# Hosts in data.hosts.tunnel are opened as plain TCP tunnels ("tunnel": true): airlock does
# not intercept TLS there, so it sees no request inside and can attach no credential and
# hold nothing for approval. Use it only for clients that pin certificates. Empty by default.
package airlock

allow contains {
	"action": "allow",
	"rule": "tunnel.connect",
	"reason": "passed through uninspected (a certificate-pinned client)",
	"credentials": [],
	"tunnel": true,
} if {
	input.phase == "connect"
	data.hosts.tunnel[input.request.host]
	t := data.hosts.tunnel[input.request.host]
	input.request.port in object.get(t, "ports", [443])
}
