package proxy

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/airlock-proxy/airlock/internal/hostname"
)

// splitHostPort normalises "host:port" (port defaulted from scheme when absent).
func splitHostPort(hostport string, defaultPort int) (string, int, error) {
	host, portStr := hostport, ""
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, portStr = h, p
		if strings.Contains(h, ":") {
			host = "[" + h + "]"
		}
	}
	port := defaultPort
	if portStr != "" {
		n, err := strconv.Atoi(portStr)
		if err != nil || n < 1 || n > 65535 {
			return "", 0, fmt.Errorf("%w: port %q", hostname.ErrBad, portStr)
		}
		port = n
	}
	if port == 0 {
		return "", 0, fmt.Errorf("%w: %q has no port", hostname.ErrBad, hostport)
	}
	h, err := hostname.Normalize(host)
	if err != nil {
		return "", 0, err
	}
	return h, port, nil
}

// joinHostPort is net.JoinHostPort for a normalised host.
func joinHostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}
