// Package hostname gives a host name the one form the policy sees, whichever spelling it
// came in, for the proxy (the request's host) and the policy's loader (the hosts its data
// lists), so that both agree on what a host is.
package hostname

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// ErrBad is returned for a host that cannot be normalised.
var ErrBad = errors.New("invalid host")

var idnaProfile = idna.New(idna.MapForLookup(), idna.BidiRule(), idna.StrictDomainName(false), idna.Transitional(false))

// Normalize returns the form of host the policy sees: lower case, no trailing dot,
// IDNA to ASCII (punycode), and IP literals in canonical form, whatever spelling they came
// in (2130706433, 0x7f.1, 0177.0.0.1, [::ffff:127.0.0.1] all become 127.0.0.1).
// Brackets around IPv6 are removed. Zones and anything that is not a hostname are refused.
func Normalize(host string) (string, error) {
	h := host
	if strings.HasPrefix(h, "[") {
		if !strings.HasSuffix(h, "]") {
			return "", fmt.Errorf("%w: %q", ErrBad, host)
		}
		h = h[1 : len(h)-1]
		if !strings.Contains(h, ":") {
			return "", fmt.Errorf("%w: %q: brackets are only for IPv6", ErrBad, host)
		}
	}
	if h == "" || len(h) > 255 {
		return "", fmt.Errorf("%w: %q", ErrBad, host)
	}
	if strings.Contains(h, ":") {
		if strings.Contains(h, "%") {
			return "", fmt.Errorf("%w: %q: IPv6 zones are not allowed", ErrBad, host)
		}
		a, err := netip.ParseAddr(h)
		if err != nil {
			return "", fmt.Errorf("%w: %q", ErrBad, host)
		}
		return a.Unmap().String(), nil
	}
	if !utf8.ValidString(h) {
		return "", fmt.Errorf("%w: %q: not valid UTF-8", ErrBad, host)
	}
	// IDNA first for a name that is not ASCII: it maps the other full stops (。．｡) to "."
	// and drops ignorable code points, so the checks of dots and IP spellings below see the
	// name a resolver would (red team: "github.com。" came out as "github.com.", and
	// "169.254.169.254。" as a name, neither the one form of its host).
	if !isASCII(h) {
		m, err := idnaProfile.ToASCII(h)
		if err != nil {
			return "", fmt.Errorf("%w: %q: %v", ErrBad, host, err)
		}
		h = m
	}
	h = strings.TrimSuffix(h, ".")
	if !wellDotted(h) {
		return "", fmt.Errorf("%w: %q", ErrBad, host)
	}
	if a, ok := parseIPv4Loose(h); ok {
		return a.String(), nil
	}
	ascii, err := idnaProfile.ToASCII(h)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrBad, host, err)
	}
	ascii = strings.ToLower(ascii)
	if !wellDotted(ascii) { // "xn--" alone converts to nothing
		return "", fmt.Errorf("%w: %q: not a valid internationalised name", ErrBad, host)
	}
	// The policy must see a fixed point: a name whose ASCII form does not convert to itself
	// again is not a name any resolver agrees on.
	if again, err := idnaProfile.ToASCII(ascii); err != nil || strings.ToLower(again) != ascii {
		return "", fmt.Errorf("%w: %q: not a valid internationalised name", ErrBad, host)
	}
	for i := 0; i < len(ascii); i++ {
		c := ascii[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return "", fmt.Errorf("%w: %q: character %q", ErrBad, host, c)
		}
	}
	// A name whose last label is numeric is an IP spelling or nonsense; refuse rather than guess.
	last := ascii[strings.LastIndexByte(ascii, '.')+1:]
	if last != "" && isAllDigits(last) {
		return "", fmt.Errorf("%w: %q: neither a hostname nor an IPv4 address", ErrBad, host)
	}
	return ascii, nil
}

// parseIPv4Loose parses the inet_aton forms resolvers accept: 1 to 4 parts, each decimal,
// octal (leading 0) or hex (0x), the last part filling the remaining bytes.
func parseIPv4Loose(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		if p == "" {
			return netip.Addr{}, false
		}
		base := 10
		digits := p
		switch {
		case len(p) > 1 && (p[:2] == "0x" || p[:2] == "0X"):
			base, digits = 16, p[2:]
			if digits == "" {
				digits = "0"
			}
		case len(p) > 1 && p[0] == '0':
			base, digits = 8, p[1:]
		}
		v, err := strconv.ParseUint(digits, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	var out uint64
	for i, v := range vals[:len(vals)-1] {
		if v > 255 {
			return netip.Addr{}, false
		}
		out |= v << (24 - 8*uint(i))
	}
	last := vals[len(vals)-1]
	if last >= 1<<(8*(5-uint(len(vals)))) && len(vals) > 1 || last > 0xffffffff {
		return netip.Addr{}, false
	}
	out |= last
	return netip.AddrFrom4([4]byte{byte(out >> 24), byte(out >> 16), byte(out >> 8), byte(out)}), true
}

func isAllDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// wellDotted reports whether h is labels joined by single dots: not empty, no dot at either
// end, no empty label.
func wellDotted(h string) bool {
	return h != "" && !strings.HasPrefix(h, ".") && !strings.HasSuffix(h, ".") && !strings.Contains(h, "..")
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
