package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"

	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// A rootless airlock cannot enter a sandbox's network namespace (setns needs CAP_SYS_ADMIN
// in its own user namespace), but it owns the sandbox's user namespace, and so has every
// capability over what that namespace owns. The backend has sockets made inside the
// network namespace (HandoffSockets, in that order), unbound, and hands them here:
// AttachSockets binds and listens on them, brings lo up and, for transparent egress, adds
// the local routes and the redirect rules through netlink sockets of that namespace. The
// result is what AttachNetns gives a root airlock.

// SocketSpec is one socket to make inside a sandbox's network namespace: socket(2)'s
// family, type and protocol.
type SocketSpec struct{ Family, Type, Proto int }

// loopbackIndex is lo's interface index, in every network namespace.
const loopbackIndex = 1

// HandoffSockets are the sockets AttachSockets needs for a sandbox of o: the proxy
// listener's (IPv4, IPv6), then with transparent egress the transparent listener's, the
// DNS responder's, an rtnetlink and an nftables socket.
func HandoffSockets(o Options) []SocketSpec {
	s := []SocketSpec{{unix.AF_INET, unix.SOCK_STREAM, 0}, {unix.AF_INET6, unix.SOCK_STREAM, 0}}
	if Transparent(o) {
		s = append(s, SocketSpec{unix.AF_INET, unix.SOCK_STREAM, 0}, SocketSpec{unix.AF_INET6, unix.SOCK_STREAM, 0},
			SocketSpec{unix.AF_INET, unix.SOCK_DGRAM, 0}, SocketSpec{unix.AF_INET6, unix.SOCK_DGRAM, 0},
			SocketSpec{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE},
			SocketSpec{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER})
	}
	return s
}

// AttachSockets sets up the sockets of HandoffSockets (it closes files) and hands them to
// host as identity id, as AttachNetns does. It returns the functions that detach them.
func AttachSockets(files []*os.File, host ProxyHost, id Identity, proxyOnly bool) ([]func(), error) {
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	th, transparent := host.(TransparentHost)
	transparent = transparent && !proxyOnly
	if want := len(HandoffSockets(Options{Proxy: host, ProxyOnly: proxyOnly})); len(files) != want {
		return nil, fmt.Errorf("sandbox sockets: %d, want %d", len(files), want)
	}
	if err := loopbackUpOn(int(files[0].Fd())); err != nil {
		return nil, err
	}
	var l NetnsListeners
	var err error
	if l.Proxy, err = listenOn(files[0:2], ProxyPort); err != nil {
		return nil, err
	}
	if transparent {
		err = transparentOn(files, &l)
	}
	if err != nil {
		l.Close()
		return nil, err
	}
	var detach []func()
	for _, ln := range l.Proxy {
		detach = append(detach, host.Attach(ln, id))
	}
	if transparent {
		detach = append(detach, th.AttachTransparent(l.Transparent, l.DNS, id))
	}
	return detach, nil
}

// transparentOn sets up transparent egress with HandoffSockets' files 2 to 7.
func transparentOn(files []*os.File, l *NetnsListeners) error {
	route := int(files[6].Fd())
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		if err := addLocalRouteOn(route, fam, loopbackIndex); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("route every address to lo: %w", err)
		}
	}
	nf := int(files[7].Fd())
	tv := unix.Timeval{Sec: 10}
	if err := unix.SetsockoptTimeval(nf, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fmt.Errorf("nftables socket: %w", err)
	}
	c, err := nftables.New(nftables.WithTestDial(netlinkOn(nf)))
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	redirectRules(c, nftables.TableFamilyIPv4, 16, mustPrefix("127.0.0.0/8"))
	redirectRules(c, nftables.TableFamilyIPv6, 24, mustPrefix("::1/128"))
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables redirect rules: %w", err)
	}
	if l.Transparent, err = listenOn(files[2:4], TransparentPort); err != nil {
		return err
	}
	for i, f := range files[4:6] {
		if err := bindOn(f, i == 1, DNSPort); err != nil {
			return fmt.Errorf("DNS socket in sandbox: %w", err)
		}
		pc, err := net.FilePacketConn(f)
		if err != nil {
			return fmt.Errorf("DNS socket in sandbox: %w", err)
		}
		l.DNS = append(l.DNS, pc)
	}
	return nil
}

// listenOn binds the IPv4 and IPv6 stream sockets of files to loopback port port and
// listens on them.
func listenOn(files []*os.File, port int) ([]net.Listener, error) {
	var lns []net.Listener
	for i, f := range files {
		err := bindOn(f, i == 1, port)
		if err == nil {
			err = unix.Listen(int(f.Fd()), unix.SOMAXCONN)
		}
		var ln net.Listener
		if err == nil {
			ln, err = net.FileListener(f)
		}
		if err != nil {
			closeListeners(lns)
			return nil, fmt.Errorf("listen on loopback port %d in sandbox: %w", port, err)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// bindOn binds f to 127.0.0.1:port, or [::1]:port (IPv6 only) when v6.
func bindOn(f *os.File, v6 bool, port int) error {
	fd := int(f.Fd())
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
		return err
	}
	if !v6 {
		return unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
	}
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
		return err
	}
	return unix.Bind(fd, &unix.SockaddrInet6{Port: port, Addr: [16]byte{15: 1}})
}

// loopbackUpOn sets IFF_UP on lo of the network namespace of the inet socket fd.
func loopbackUpOn(fd int) error {
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("read lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

// netlinkOn exchanges nftables' messages over the netlink socket fd: a batch is sent in one
// datagram (as the kernel wants it) and its acknowledgements read back; an error the kernel
// reports ends the exchange with that error.
func netlinkOn(fd int) func([]netlink.Message) ([]netlink.Message, error) {
	return func(req []netlink.Message) ([]netlink.Message, error) {
		var buf []byte
		acks := 0
		for _, m := range req {
			b, err := m.MarshalBinary()
			if err != nil {
				return nil, err
			}
			buf = append(buf, b...)
			if m.Header.Flags&netlink.Acknowledge != 0 {
				acks++
			}
		}
		if len(buf) == 0 {
			return nil, nil
		}
		if err := unix.Sendto(fd, buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			return nil, err
		}
		var out []netlink.Message
		rb := make([]byte, 1<<16)
		for acks > 0 {
			n, _, err := unix.Recvfrom(fd, rb, 0)
			if err != nil {
				return nil, err
			}
			msgs, err := syscall.ParseNetlinkMessage(rb[:n])
			if err != nil {
				return nil, err
			}
			for _, m := range msgs {
				if m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4 {
					if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
						return nil, unix.Errno(-errno)
					}
					acks--
				}
				out = append(out, netlink.Message{Header: netlink.Header{Length: m.Header.Len,
					Type: netlink.HeaderType(m.Header.Type), Flags: netlink.HeaderFlags(m.Header.Flags),
					Sequence: m.Header.Seq, PID: m.Header.Pid}, Data: m.Data})
			}
		}
		return out, nil
	}
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
