package native

import (
	"fmt"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// landlockSupport is what a command's Landlock ruleset handles on this kernel: every kind of
// write (confined to the writable directories) and, from ABI 6, abstract unix sockets and
// signals scoped to the sandbox. Zero when the kernel has no Landlock (the read-only mounts
// still hold).
func landlockSupport() landlockRules {
	abi, err := ll.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return landlockRules{}
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
	r := landlockRules{HandledFS: write}
	if abi >= 6 {
		r.Scoped = ll.ScopeAbstractUnixSocket | ll.ScopeSignal
	}
	return r
}

// restrictLandlock confines the calling thread (and what it execs) by rules, allowing writes
// beneath the writable directories. no_new_privs must already be set.
func restrictLandlock(rules landlockRules, writable []string) error {
	if rules.HandledFS == 0 {
		return nil
	}
	attr := ll.RulesetAttr{HandledAccessFS: rules.HandledFS, Scoped: rules.Scoped}
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
		rule := ll.PathBeneathAttr{AllowedAccess: rules.HandledFS, ParentFd: dfd}
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
