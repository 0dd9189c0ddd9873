package native

import (
	"context"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
)

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

// FailJoinForTest makes s's holder look as if it could not join the sandbox's v1 groups.
func FailJoinForTest(s *sandbox.Sandbox, err error) {
	n := s.Instance().(*nativeInstance)
	if n.join == nil {
		n.join = &holderJoin{pid: make(chan int), done: make(chan struct{})}
		close(n.join.done)
	}
	<-n.join.done
	n.join.err = err
}

// V1PathForTest is v1Path.
var V1PathForTest = v1Path

// JoinWithoutHolderForTest starts a holder's join into a v1 group at dir and ends it
// before any holder starts (a Create that failed first), returning the join's error.
func JoinWithoutHolderForTest(dir string) error {
	j := (&cgroups{v1: map[string]string{"pids": dir}}).startJoin()
	time.Sleep(3 * warmEvery) // a few rounds of warming
	j.end()
	return j.wait(context.Background())
}
