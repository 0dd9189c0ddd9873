package airlock_test

import data.airlock

pinned := {"pinned.example.com": {}, "pinned-alt.example.com": {"ports": [8443]}}

test_tunnel_hosts_pass_through if {
	d := airlock.decision with input as connect("pinned.example.com", 443) with data.hosts.tunnel as pinned
	d.action == "allow"
	d.rule == "tunnel.connect"
	d.tunnel == true
	d.credentials == []
}

test_tunnel_ports_from_data if {
	d1 := airlock.decision with input as connect("pinned-alt.example.com", 8443) with data.hosts.tunnel as pinned
	d1.tunnel == true
	d2 := airlock.decision with input as connect("pinned-alt.example.com", 443) with data.hosts.tunnel as pinned
	d2.action == "deny"
}

test_no_tunnels_by_default if {
	d := airlock.decision with input as connect("pinned.example.com", 443)
	d.action == "deny"
}

test_registries_are_never_tunnelled if {
	every host in registry_hosts {
		d := airlock.decision with input as connect(host, 443)
		d.tunnel == false
	}
}
