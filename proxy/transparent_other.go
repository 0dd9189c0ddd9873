//go:build !linux

package proxy

import (
	"errors"
	"net/netip"
)

func getOriginalDst(int) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("transparent egress needs Linux")
}
