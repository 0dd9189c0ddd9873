package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Transparent egress. Besides the proxy listener on 127.0.0.1:ProxyPort, a sandbox's
// network namespace gets
//
//   - a "local" route for every IPv4 and IPv6 address on lo, so that a connection to any
//     address stays inside the namespace instead of failing with ENETUNREACH;
//   - an nftables nat table (family ip and ip6, hook output) that redirects every TCP
//     connection not addressed to loopback to TransparentPort and every UDP datagram to
//     port 53 to DNSPort, both on loopback;
//   - a TCP listener on TransparentPort and a UDP socket on DNSPort (127.0.0.1 and [::1])
//     opened by airlock inside the namespace, like the proxy listener.
//
// The kernel keeps the address the client asked for (SO_ORIGINAL_DST), which is how
// airlock knows where a redirected connection was going. UDP to any other port reaches no
// socket and is refused (ICMP port unreachable), so QUIC clients fall back to TCP. Nothing
// leaves the namespace: there is still no interface but lo. The sandbox has no
// CAP_NET_ADMIN, so it can change neither the routes nor the rules.
const (
	TransparentPort = 3129
	DNSPort         = 53
)

// TransparentHost serves a sandbox's transparent connections and DNS queries; *proxy.Proxy
// implements it. A ProxyHost without it gets the proxy listener only.
type TransparentHost interface {
	// AttachTransparent serves redirected TCP connections on tcp and DNS on dns as
	// identity id until detach is called; detach closes them.
	AttachTransparent(tcp []net.Listener, dns []net.PacketConn, id Identity) (detach func())
}

// Transparent reports whether a sandbox made with o gets transparent egress: it has a
// proxy that can serve it and ProxyOnly is not set.
func Transparent(o Options) bool {
	if o.Proxy == nil || o.ProxyOnly {
		return false
	}
	_, ok := o.Proxy.(TransparentHost)
	return ok
}

// NetnsListeners are the sockets airlock opens inside a sandbox's network namespace.
type NetnsListeners struct {
	Proxy       []net.Listener   // 127.0.0.1 and [::1], ProxyPort
	Transparent []net.Listener   // 127.0.0.1 and [::1], TransparentPort (transparent only)
	DNS         []net.PacketConn // 127.0.0.1 and [::1], DNSPort (transparent only)
}

// Close closes every socket.
func (l NetnsListeners) Close() {
	closeListeners(l.Proxy)
	closeListeners(l.Transparent)
	for _, c := range l.DNS {
		c.Close()
	}
}

// ListenTransparentInNetns is ListenInNetns plus transparent egress: the routes, the
// redirect rules and the transparent and DNS sockets in the namespace at nsPath. Needs
// CAP_SYS_ADMIN and CAP_NET_ADMIN (root).
func ListenTransparentInNetns(nsPath string) (NetnsListeners, error) {
	var l NetnsListeners
	err := inNetns(nsPath, func(nsFD int) error {
		var err error
		if l.Proxy, err = openProxyListeners(); err != nil {
			return err
		}
		if err = setupTransparent(nsFD); err != nil {
			return err
		}
		if l.Transparent, err = listenPair("tcp", TransparentPort); err != nil {
			return err
		}
		port := strconv.Itoa(DNSPort)
		for _, a := range []string{"127.0.0.1", "::1"} {
			pc, err := net.ListenPacket("udp", net.JoinHostPort(a, port))
			if err != nil {
				return fmt.Errorf("listen for DNS on %s in sandbox: %w", a, err)
			}
			l.DNS = append(l.DNS, pc)
		}
		return nil
	})
	if err != nil {
		l.Close()
		return NetnsListeners{}, err
	}
	return l, nil
}

// AttachNetns opens the sandbox's sockets in the network namespace at nsPath and hands them
// to host as identity id: the proxy listener always, transparent egress unless proxyOnly
// or host cannot serve it. It returns the functions that detach them.
func AttachNetns(nsPath string, host ProxyHost, id Identity, proxyOnly bool) ([]func(), error) {
	th, ok := host.(TransparentHost)
	if proxyOnly || !ok {
		lns, err := listenInNetns(nsPath)
		if err != nil {
			return nil, err
		}
		var detach []func()
		for _, ln := range lns {
			detach = append(detach, host.Attach(ln, id))
		}
		return detach, nil
	}
	l, err := ListenTransparentInNetns(nsPath)
	if err != nil {
		return nil, err
	}
	var detach []func()
	for _, ln := range l.Proxy {
		detach = append(detach, host.Attach(ln, id))
	}
	detach = append(detach, th.AttachTransparent(l.Transparent, l.DNS, id))
	return detach, nil
}

func listenPair(network string, port int) ([]net.Listener, error) {
	p := strconv.Itoa(port)
	ln4, err := net.Listen(network+"4", net.JoinHostPort("127.0.0.1", p))
	if err != nil {
		return nil, fmt.Errorf("listen on 127.0.0.1:%s in sandbox: %w", p, err)
	}
	ln6, err := net.Listen(network+"6", net.JoinHostPort("::1", p))
	if err != nil {
		ln4.Close()
		return nil, fmt.Errorf("listen on [::1]:%s in sandbox: %w", p, err)
	}
	return []net.Listener{ln4, ln6}, nil
}

// inNetns runs fn on a locked OS thread inside the network namespace at nsPath (see
// listenInNetns), passing the namespace's descriptor.
func inNetns(nsPath string, fn func(nsFD int) error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("open own network namespace: %w", err)
			return
		}
		defer orig.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("open sandbox network namespace: %w", err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter sandbox network namespace: %w", err)
			return
		}
		ferr := fn(int(target.Fd()))
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- errors.Join(ferr, fmt.Errorf("return to own network namespace: %w", err))
			return // the thread stays locked and dies with this goroutine
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
}

// setupTransparent adds the local routes and the redirect rules in the calling thread's
// network namespace (nsFD is its descriptor, for the nftables connection). It may run
// again in a namespace it set up (a restarted airlock taking a sandbox over): a route
// already there is the one it adds, and the rules are replaced, not added twice.
func setupTransparent(nsFD int) error {
	if err := addLocalRoute(unix.AF_INET); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("route every IPv4 address to lo: %w", err)
	}
	if err := addLocalRoute(unix.AF_INET6); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("route every IPv6 address to lo: %w", err)
	}
	c, err := nftables.New(nftables.WithNetNSFd(nsFD))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	defer c.CloseLasting()
	redirectRules(c, nftables.TableFamilyIPv4, 16, netip.MustParsePrefix("127.0.0.0/8"))
	redirectRules(c, nftables.TableFamilyIPv6, 24, netip.MustParsePrefix("::1/128"))
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables redirect rules: %w", err)
	}
	return nil
}

// redirectRules: in family's nat output hook, loopback destinations (daddr at offset
// daddrOff of the network header) are left alone; UDP to port 53 goes to DNSPort; any
// other TCP goes to TransparentPort.
func redirectRules(c *nftables.Conn, family nftables.TableFamily, daddrOff uint32, loop netip.Prefix) {
	t := c.AddTable(&nftables.Table{Family: family, Name: "airlock"})
	c.FlushTable(t) // the rules of an earlier setup, if any
	ch := c.AddChain(&nftables.Chain{Name: "redirect", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest})
	addr := loop.Addr().AsSlice()
	mask := net.CIDRMask(loop.Bits(), len(addr)*8)
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: daddrOff, Len: uint32(len(addr))},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(len(addr)), Mask: []byte(mask), Xor: make([]byte, len(addr))},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr},
		&expr.Verdict{Kind: expr.VerdictReturn},
	}})
	redirect := func(proto byte, match []expr.Any, port uint16) {
		e := []expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		}
		e = append(e, match...)
		e = append(e,
			&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
			&expr.Redir{RegisterProtoMin: 1},
		)
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: e})
	}
	redirect(unix.IPPROTO_UDP, []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(53)},
	}, DNSPort)
	redirect(unix.IPPROTO_TCP, nil, TransparentPort)
}

// addLocalRoute adds "local default dev lo" to the local table of family (rtnetlink), so
// every address of that family is delivered inside the namespace.
func addLocalRoute(family int) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return err
	}
	return addLocalRouteOn(fd, family, lo.Index)
}

// addLocalRouteOn is addLocalRoute on the rtnetlink socket fd, lo being interface loIndex.
func addLocalRouteOn(fd, family, loIndex int) error {
	const hdr, rtm, rta = unix.SizeofNlMsghdr, unix.SizeofRtMsg, 8
	b := make([]byte, hdr+rtm+rta)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], uint32(len(b)))
	ne.PutUint16(b[4:], unix.RTM_NEWROUTE)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	ne.PutUint32(b[8:], 1)
	m := b[hdr:]
	m[0] = byte(family) // rtm_family; dst_len, src_len, tos stay 0: the default route
	m[4] = unix.RT_TABLE_LOCAL
	m[5] = unix.RTPROT_BOOT
	m[6] = unix.RT_SCOPE_HOST
	m[7] = unix.RTN_LOCAL
	a := b[hdr+rtm:]
	ne.PutUint16(a[0:], rta)
	ne.PutUint16(a[2:], unix.RTA_OIF)
	ne.PutUint32(a[4:], uint32(loIndex))
	if err := unix.Sendto(fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	resp := make([]byte, 4096)
	n, _, err := unix.Recvfrom(fd, resp, 0)
	if err != nil {
		return err
	}
	msgs, err := syscall.ParseNetlinkMessage(resp[:n])
	if err != nil {
		return err
	}
	for _, msg := range msgs {
		if msg.Header.Type == unix.NLMSG_ERROR && len(msg.Data) >= 4 {
			if errno := int32(ne.Uint32(msg.Data)); errno != 0 {
				return unix.Errno(-errno)
			}
			return nil
		}
	}
	return errors.New("no answer from rtnetlink")
}
