package proxy

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/airlock-proxy/airlock/internal/hostname"
)

// ErrBadHost is returned for a host that cannot be normalised.
var ErrBadHost = hostname.ErrBad

// NormalizeHost returns the form of host the policy sees (hostname.Normalize): lower case,
// no trailing dot, IDNA to ASCII (punycode), and IP literals in canonical form, whatever
// spelling they came in (2130706433, 0x7f.1, 0177.0.0.1, [::ffff:127.0.0.1] all become
// 127.0.0.1). Brackets around IPv6 are removed. Zones and anything that is not a hostname
// are refused.
func NormalizeHost(host string) (string, error) { return hostname.Normalize(host) }

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
			return "", 0, fmt.Errorf("%w: port %q", ErrBadHost, portStr)
		}
		port = n
	}
	if port == 0 {
		return "", 0, fmt.Errorf("%w: %q has no port", ErrBadHost, hostport)
	}
	h, err := NormalizeHost(host)
	if err != nil {
		return "", 0, err
	}
	return h, port, nil
}

// joinHostPort is net.JoinHostPort for a normalised host.
func joinHostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}
