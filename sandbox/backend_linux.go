package sandbox

import "net"

// ListenInNetns opens the proxy listeners (127.0.0.1 and [::1], port ProxyPort) inside the
// network namespace at nsPath (e.g. /proc/PID/ns/net of a container's process), bringing
// its lo up first. The sockets stay in that namespace: a backend hands them to
// Options.Proxy with the sandbox's identity, so the listener is the identity and the
// namespace needs no route anywhere. Needs CAP_SYS_ADMIN (root).
func ListenInNetns(nsPath string) ([]net.Listener, error) { return listenInNetns(nsPath) }
