package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM inside a sandbox: debugging other processes, mounting,
// kernel and key management, io_uring (which bypasses seccomp), joining or creating
// namespaces, and other administrative calls.
var deniedSyscalls = []string{
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
	"mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "open_tree_attr",
	"fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"bpf", "perf_event_open", "keyctl", "add_key", "request_key",
	"io_uring_setup", "io_uring_enter", "io_uring_register", "userfaultfd",
	"setns", "unshare", "name_to_handle_at", "open_by_handle_at",
	"reboot", "swapon", "swapoff", "acct", "quotactl", "syslog", "iopl", "ioperm",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "vhangup",
	"lookup_dcookie", "fanotify_init", "nfsservctl", "uselib",
}

// cloneNamespaceFlags are refused on clone: no new namespaces of any kind.
const cloneNamespaceFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID |
	unix.CLONE_NEWNET | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// setIDBits in a mode argument are refused: files written to the workspace belong to its
// owner on the host, so a set-user-ID file planted there would run as that owner.
const setIDBits = unix.S_ISUID | unix.S_ISGID

func errnoAction(e unix.Errno) seccomp.Action {
	return seccomp.ActionErrno | seccomp.Action(e)
}

func withBits(name string, arg uint32, bits uint64) seccomp.NameWithConditions {
	return seccomp.NameWithConditions{Name: name, Conditions: seccomp.ArgumentConditions{
		{Argument: arg, Operation: seccomp.BitsSet, Value: bits},
	}}
}

func sandboxPolicy() seccomp.Policy {
	return seccomp.Policy{
		DefaultAction: seccomp.ActionAllow,
		Syscalls: []seccomp.SyscallGroup{
			{Action: seccomp.ActionErrno, Names: deniedSyscalls},
			// clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc
			// fall back to clone, whose flags are checked below.
			{Action: errnoAction(unix.ENOSYS), Names: []string{"clone3", "openat2"}},
			{Action: seccomp.ActionErrno, NamesWithCondtions: []seccomp.NameWithConditions{
				withBits("clone", 0, cloneNamespaceFlags),
				withBits("chmod", 1, setIDBits),
				withBits("fchmod", 1, setIDBits),
				withBits("fchmodat", 2, setIDBits),
				withBits("fchmodat2", 2, setIDBits),
				withBits("creat", 1, setIDBits),
				withBits("open", 2, setIDBits),
				withBits("openat", 3, setIDBits),
				withBits("mknod", 1, setIDBits),
				withBits("mknodat", 2, setIDBits),
			}},
			// Only IPv4, IPv6 and unix sockets: AF_VSOCK in particular is not confined by
			// the network namespace.
			{Action: errnoAction(unix.EAFNOSUPPORT), NamesWithCondtions: []seccomp.NameWithConditions{
				{Name: "socket", Conditions: seccomp.ArgumentConditions{
					{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX},
					{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET},
					{Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_INET6},
				}},
			}},
		},
	}
}

// seccompProgram is the sandbox filter as the kernel takes it: an array of struct
// sock_filter (8 bytes each, native byte order). The parent assembles it once and hands it to
// each sandbox's holder, which installs it in every command just before exec.
var seccompProgram = sync.OnceValues(func() ([]byte, error) {
	policy := sandboxPolicy()
	insts, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("assemble seccomp filter: %w", err)
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return nil, fmt.Errorf("assemble seccomp filter: %w", err)
	}
	b := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		b = binary.NativeEndian.AppendUint16(b, r.Op)
		b = append(b, r.Jt, r.Jf)
		b = binary.NativeEndian.AppendUint32(b, r.K)
	}
	return b, nil
})

// loadSeccomp installs a filter from seccompProgram on the calling thread (no_new_privs
// must be set).
func loadSeccomp(prog []byte) error {
	if len(prog) == 0 || len(prog)%8 != 0 || len(prog)/8 > 0xffff {
		return errors.New("load seccomp filter: malformed program")
	}
	filters := make([]unix.SockFilter, len(prog)/8)
	for i := range filters {
		b := prog[8*i:]
		filters[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:])}
	}
	fprog := unix.SockFprog{Len: uint16(len(filters)), Filter: &filters[0]}
	if _, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return fmt.Errorf("load seccomp filter: %w", e)
	}
	return nil
}
