package proxy

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SO_ORIGINAL_DST (linux/netfilter_ipv4.h) and IP6T_SO_ORIGINAL_DST share the value 80.
const soOriginalDst = 80

// getOriginalDst reads the pre-NAT destination of an accepted, redirected socket.
func getOriginalDst(fd int) (netip.AddrPort, error) {
	var sa unix.RawSockaddrInet6 // large enough for either family
	size := uint32(unsafe.Sizeof(sa))
	level := unix.SOL_IP
	if dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN); err == nil && dom == unix.AF_INET6 {
		level = unix.SOL_IPV6
	}
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), uintptr(level), soOriginalDst,
		uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&size)), 0)
	if errno != 0 {
		return netip.AddrPort{}, errno
	}
	b := (*[unsafe.Sizeof(sa)]byte)(unsafe.Pointer(&sa))[:]
	port := binary.BigEndian.Uint16(b[2:4])
	if sa.Family == unix.AF_INET {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port), nil
	}
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), port), nil
}
