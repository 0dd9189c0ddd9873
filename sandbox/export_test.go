package sandbox

// NetNSInode exposes a native sandbox's network namespace inode to the external tests.
func NetNSInode(s *Sandbox) uint64 {
	if n, ok := s.inst.(*nativeInstance); ok {
		return n.NetNSInode()
	}
	return 0
}
