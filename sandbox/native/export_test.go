package native

import "github.com/airlock-proxy/airlock/sandbox"

// NetNSInode exposes a native sandbox's network namespace inode to the external tests.
func NetNSInode(s *sandbox.Sandbox) uint64 {
	if n, ok := s.Instance().(*nativeInstance); ok {
		return n.NetNSInode()
	}
	return 0
}

// StageExecForTest is argv[0] of the Go holder's exec stage (the run's init).
const StageExecForTest = stageExec

// CStages reports whether the stages are C code (a cgo build), with no Go exec stage.
const CStages = cHolder

// HolderPID is a native sandbox's holder's pid; 0 for another backend's.
func HolderPID(s *sandbox.Sandbox) int {
	if n, ok := s.Instance().(*nativeInstance); ok {
		return n.holderPID
	}
	return 0
}

// V1PathForTest is v1Path.
var V1PathForTest = v1Path

// StartWarmingForTest starts a warming under root: a channel closed once it has ended,
// and what ends it; nil and a no-op without one.
func StartWarmingForTest(root string) (<-chan struct{}, func()) {
	w := startWarming(root)
	if w == nil {
		return nil, func() {}
	}
	return w.done, w.end
}

// WarmForTest is how long a warming lasts at most.
const WarmForTest = warmFor
