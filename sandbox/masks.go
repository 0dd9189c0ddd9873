package sandbox

// DefaultMaskPaths are host paths that hold secrets on typical hosts: a sandbox whose root
// is the host's sees none of them (each is covered by an empty read-only directory or
// file wherever its root or a read-only path would show it; the workspace is not masked:
// its owner chose to share it). What tools need to run stays: the rest of /etc, /usr, the
// certificates (/etc/ssl/certs), the package database. Options.MaskPaths replaces the
// list; the config adds to it (sandbox.mask_paths) and takes from it
// (sandbox.unmask_paths). A path the host lacks, or that the sandbox does not see anyway,
// costs nothing. docs/threat-model.md lists them with their reasons.
var DefaultMaskPaths = []string{
	// Accounts and logins.
	"/root", "/home", "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
	"/etc/security/opasswd", "/etc/sudoers", "/etc/sudoers.d", "/etc/ssh",
	"/etc/krb5.keytab",
	// Private keys and VPN secrets.
	"/etc/ssl/private", "/etc/pki/tls/private", "/etc/letsencrypt", "/etc/wireguard",
	"/etc/openvpn", "/etc/ipsec.secrets", "/etc/ppp/chap-secrets", "/etc/ppp/pap-secrets",
	"/etc/NetworkManager/system-connections", "/etc/credstore", "/etc/credstore.encrypted",
	// Container engines and clusters.
	"/etc/docker", "/var/lib/docker", "/var/lib/containerd", "/etc/kubernetes",
	"/var/lib/kubelet", "/var/lib/etcd", "/etc/rancher", "/var/lib/rancher",
	// Databases and service state.
	"/var/lib/postgresql", "/var/lib/mysql", "/var/lib/mariadb", "/var/lib/mongodb",
	"/var/lib/redis", "/var/lib/cloud", "/var/backups", "/run/secrets",
}
