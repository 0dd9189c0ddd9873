package native

import "github.com/airlock-proxy/airlock/sandbox"

// NetNSInode exposes a native sandbox's network namespace inode to the external tests.
func NetNSInode(s *sandbox.Sandbox) uint64 {
	if n, ok := s.Instance().(*nativeInstance); ok {
		return n.NetNSInode()
	}
	return 0
}
