package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// Resolver looks up the addresses of a host; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DialDeniedError is returned when the dial guard refuses a destination.
type DialDeniedError struct {
	Host   string
	Addr   netip.Addr
	Reason string
}

func (e *DialDeniedError) Error() string {
	if e.Addr.IsValid() && e.Addr.String() != e.Host {
		return fmt.Sprintf("destination %s resolves to %s, %s", e.Host, e.Addr, e.Reason)
	}
	return fmt.Sprintf("destination %s is %s", e.Host, e.Reason)
}

// blocked lists the ranges never dialled unless allowed explicitly, with why.
var blocked = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a carrier-grade NAT address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address (cloud metadata lives here)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("::/128"), "an unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("fc00::/7"), "a private (ULA) address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
	{netip.MustParsePrefix("2001::/32"), "a Teredo address"},
	{netip.MustParsePrefix("100::/64"), "a discard-only address"},
}

var (
	sixToFour = netip.MustParsePrefix("2002::/16")
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	nat64Loc  = netip.MustParsePrefix("64:ff9b:1::/48")
	v4compat  = netip.MustParsePrefix("::/96")
)

// embeddedV4 returns the IPv4 address an IPv6 form carries (mapped, compatible, 6to4, NAT64).
func embeddedV4(a netip.Addr) (netip.Addr, bool) {
	if a.Is4In6() {
		return a.Unmap(), true
	}
	if !a.Is6() {
		return netip.Addr{}, false
	}
	b := a.As16()
	switch {
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), true
	case nat64.Contains(a), nat64Loc.Contains(a), v4compat.Contains(a) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback():
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), true
	}
	return netip.Addr{}, false
}

// Guard resolves a destination once, checks every address it resolves to, and dials a
// checked address itself, so a DNS answer that changes between check and dial cannot
// redirect the connection.
type Guard struct {
	Allow    []netip.Prefix // --allow-private
	Resolver Resolver       // nil: net.DefaultResolver
	Dialer   *net.Dialer    // nil: 10s timeout
	Parent   *ParentProxy   // nil: dial directly

	mu   sync.RWMutex
	self map[netip.AddrPort]bool // the proxy's own listeners: never dialled
	any  map[uint16]bool         // ports the proxy listens on at every local address
}

// AddSelf marks a listener address of the proxy as never dialable, whatever is allowed.
func (g *Guard) AddSelf(addr net.Addr) {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.self == nil {
		g.self, g.any = map[netip.AddrPort]bool{}, map[uint16]bool{}
	}
	if ap.Addr().IsUnspecified() {
		g.any[ap.Port()] = true
		return
	}
	g.self[netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())] = true
}

// Check says why addr may not be dialled, or "" when it may.
func (g *Guard) Check(addr netip.Addr, port int) string {
	addr = addr.Unmap().WithZone("")
	if g.isSelf(addr, port) {
		return "the proxy itself"
	}
	for _, p := range g.Allow {
		if p.Contains(addr) {
			return ""
		}
	}
	if v4, ok := embeddedV4(addr); ok && v4 != addr {
		if why := g.Check(v4, port); why != "" {
			return why + " (embedded in " + addr.String() + ")"
		}
	}
	for _, b := range blocked {
		if b.prefix.Contains(addr) {
			return b.why
		}
	}
	return ""
}

func (g *Guard) isSelf(addr netip.Addr, port int) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.self[netip.AddrPortFrom(addr, uint16(port))] {
		return true
	}
	if g.any[uint16(port)] && (addr.IsLoopback() || isLocalAddr(addr)) {
		return true
	}
	return false
}

func isLocalAddr(a netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: treat as ours (fail closed)
	}
	for _, ia := range addrs {
		if n, ok := ia.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Unmap() == a {
				return true
			}
		}
	}
	return false
}

// DialContext resolves addr's host, refuses if any resolved address is blocked, and dials
// the checked addresses in order.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: bad port", addr)
	}
	ips, err := g.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	for _, ip := range ips {
		if why := g.Check(ip, port); why != "" {
			return nil, &DialDeniedError{Host: host, Addr: ip, Reason: why}
		}
	}
	d := g.Dialer
	if d == nil {
		d = &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	}
	if pu := g.Parent.parentFor(addr); pu != nil {
		// The addresses are checked; the parent resolves the name again (docs/transparent.md).
		return g.Parent.dialParent(ctx, d, pu, addr)
	}
	var errs []error
	for _, ip := range ips {
		c, err := d.DialContext(ctx, network, netip.AddrPortFrom(ip, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("dial %s: %w", host, errors.Join(errs...))
}

func (g *Guard) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip.Unmap()}, nil
	}
	r := g.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, &ResolveError{Host: host, Err: err}
	}
	if len(ips) == 0 {
		return nil, &ResolveError{Host: host, Err: errors.New("no addresses")}
	}
	for i := range ips {
		ips[i] = ips[i].Unmap()
	}
	return ips, nil
}

// ResolveError says a destination's name could not be resolved.
type ResolveError struct {
	Host string
	Err  error
}

func (e *ResolveError) Error() string { return fmt.Sprintf("resolve %s: %v", e.Host, e.Err) }
func (e *ResolveError) Unwrap() error { return e.Err }
