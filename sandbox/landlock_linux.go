package sandbox

import (
	"fmt"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// restrictLandlock confines writes of the calling thread (and what it execs) to the given
// directories and scopes abstract unix sockets and signals to the sandbox, as far as the
// kernel's Landlock ABI allows; without Landlock it does nothing (the read-only mounts still
// hold). no_new_privs must already be set.
func restrictLandlock(writable []string) error {
	abi, err := ll.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return nil
	}
	write := uint64(ll.AccessFSWriteFile | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile |
		ll.AccessFSMakeChar | ll.AccessFSMakeDir | ll.AccessFSMakeReg | ll.AccessFSMakeSock |
		ll.AccessFSMakeFifo | ll.AccessFSMakeBlock | ll.AccessFSMakeSym)
	if abi >= 2 {
		write |= ll.AccessFSRefer
	}
	if abi >= 3 {
		write |= ll.AccessFSTruncate
	}
	attr := ll.RulesetAttr{HandledAccessFS: write}
	if abi >= 6 {
		attr.Scoped = ll.ScopeAbstractUnixSocket | ll.ScopeSignal
	}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return fmt.Errorf("create landlock ruleset: %w", err)
	}
	defer unix.Close(fd)
	for _, dir := range writable {
		dfd, err := unix.Open(dir, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		rule := ll.PathBeneathAttr{AllowedAccess: write, ParentFd: dfd}
		err = ll.LandlockAddPathBeneathRule(fd, &rule, 0)
		unix.Close(dfd)
		if err != nil {
			return fmt.Errorf("landlock rule for %s: %w", dir, err)
		}
	}
	if err := ll.LandlockRestrictSelf(fd, 0); err != nil {
		return fmt.Errorf("landlock restrict: %w", err)
	}
	return nil
}
