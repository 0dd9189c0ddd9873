package sandbox

import (
	"fmt"
	"net"
	"strconv"

	"golang.org/x/sys/unix"
)

// ListenInNetns opens the proxy listeners (127.0.0.1 and [::1], port ProxyPort) inside the
// network namespace at nsPath (e.g. /proc/PID/ns/net of a container's process), bringing
// its lo up first. The sockets stay in that namespace: a backend hands them to
// Options.Proxy with the sandbox's identity, so the listener is the identity and the
// namespace needs no route anywhere. Needs CAP_SYS_ADMIN (root).
func ListenInNetns(nsPath string) ([]net.Listener, error) { return listenInNetns(nsPath) }

// listenInNetns brings up lo in the network namespace at nsPath and opens the proxy
// listeners (127.0.0.1 and [::1], port ProxyPort) inside it. The sockets stay in that
// namespace; whoever accepts on them does so from its own.
//
// setns affects only the calling OS thread: the work happens on a locked thread that is
// switched back before it is unlocked. If switching back fails the goroutine exits still
// locked, and the Go runtime terminates that thread rather than reuse it.
func listenInNetns(nsPath string) ([]net.Listener, error) {
	var lns []net.Listener
	err := inNetns(nsPath, func(int) error {
		var err error
		lns, err = openProxyListeners()
		return err
	})
	if err != nil {
		closeListeners(lns)
		return nil, err
	}
	return lns, nil
}

func openProxyListeners() ([]net.Listener, error) {
	if err := loopbackUp(); err != nil {
		return nil, err
	}
	port := strconv.Itoa(ProxyPort)
	ln4, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		return nil, fmt.Errorf("listen on 127.0.0.1 in sandbox: %w", err)
	}
	ln6, err := net.Listen("tcp6", net.JoinHostPort("::1", port))
	if err != nil {
		ln4.Close()
		return nil, fmt.Errorf("listen on [::1] in sandbox: %w", err)
	}
	return []net.Listener{ln4, ln6}, nil
}

// loopbackUp sets IFF_UP on lo in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket for lo: %w", err)
	}
	defer unix.Close(fd)
	return loopbackUpOn(fd)
}

func closeListeners(lns []net.Listener) {
	for _, ln := range lns {
		ln.Close()
	}
}
