package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
)

func TestGuardCheckTable(t *testing.T) {
	g := &Guard{}
	blockedAddrs := []string{
		"127.0.0.1", "127.255.255.254", "::1", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1",
		"169.254.169.254", "fe80::1", "100.64.0.1", "100.127.255.255", "0.0.0.0", "::", "224.0.0.1",
		"ff02::1", "fd00::1", "::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:10.0.0.1",
		"2002:7f00:1::", "2002:a9fe:a9fe::1", "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "::127.0.0.1",
		"255.255.255.255", "2001:0:4136:e378:8000:63bf:3fff:fdd2",
	}
	for _, s := range blockedAddrs {
		if why := g.Check(netip.MustParseAddr(s), 80); why == "" {
			t.Errorf("Check(%s) allowed, want blocked", s)
		}
	}
	for _, s := range []string{"93.184.216.34", "1.1.1.1", "2606:4700::1111", "2002:5db8:d822::1", "64:ff9b::5db8:d822"} {
		if why := g.Check(netip.MustParseAddr(s), 443); why != "" {
			t.Errorf("Check(%s) = %q, want allowed", s, why)
		}
	}
}

func TestGuardAllowPrivateButNeverSelf(t *testing.T) {
	g := &Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8")}}
	g.AddSelf(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 3128})
	if why := g.Check(netip.MustParseAddr("10.2.3.4"), 80); why != "" {
		t.Errorf("allowed private range refused: %s", why)
	}
	if why := g.Check(netip.MustParseAddr("127.0.0.1"), 8080); why != "" {
		t.Errorf("allowed loopback refused: %s", why)
	}
	if why := g.Check(netip.MustParseAddr("127.0.0.1"), 3128); why == "" {
		t.Error("the proxy's own listener was dialable")
	}
	if why := g.Check(netip.MustParseAddr("192.168.0.1"), 80); why == "" {
		t.Error("a private range outside --allow-private was dialable")
	}
}

// flipResolver answers first with one address, then with another: a rebinding DNS server.
type flipResolver struct {
	first, then netip.Addr
	calls       atomic.Int32
}

func (r *flipResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if r.calls.Add(1) == 1 {
		return []netip.Addr{r.first}, nil
	}
	return []netip.Addr{r.then}, nil
}

func TestGuardDialsTheCheckedAddress(t *testing.T) {
	// The checked (allowed) address is 127.0.0.2; the rebinding answer is 127.0.0.1, which
	// is not allowed. A guard that resolved again at dial time would connect to the wrong one.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 on this host: %v", err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	other, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err == nil {
		defer other.Close()
	}
	r := &flipResolver{first: netip.MustParseAddr("127.0.0.2"), then: netip.MustParseAddr("127.0.0.1")}
	g := &Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}, Resolver: r}
	c, err := g.DialContext(context.Background(), "tcp", net.JoinHostPort("rebind.test", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	if got := c.RemoteAddr().(*net.TCPAddr).IP.String(); got != "127.0.0.2" {
		t.Errorf("connected to %s, want the checked 127.0.0.2", got)
	}
	if n := r.calls.Load(); n != 1 {
		t.Errorf("resolved %d times, want once", n)
	}
	// The second lookup answers 127.0.0.1, which is refused.
	_, err = g.DialContext(context.Background(), "tcp", net.JoinHostPort("rebind.test", strconv.Itoa(port)))
	var de *DialDeniedError
	if !errors.As(err, &de) {
		t.Fatalf("dial after rebinding: err = %v, want DialDeniedError", err)
	}
}

type multiResolver []netip.Addr

func (m multiResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return m, nil
}

func TestGuardRefusesIfAnyAddressIsBlocked(t *testing.T) {
	g := &Guard{Resolver: multiResolver{netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("10.0.0.5")}}
	_, err := g.DialContext(context.Background(), "tcp", "mixed.test:443")
	var de *DialDeniedError
	if !errors.As(err, &de) || de.Addr.String() != "10.0.0.5" {
		t.Fatalf("err = %v, want refusal naming 10.0.0.5", err)
	}
}
