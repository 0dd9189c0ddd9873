//go:build linux && amd64

// Command sysprobe makes system calls through a chosen ABI of x86_64 and reports what
// happened to each: the escape suites (e2e/sandbox, e2e/docker) build it static and run it
// inside sandboxes, where every call through a foreign ABI must kill the process and the
// native ones must be refused.
//
//	sysprobe x86_64|i386|x32 CALL[=ARG] ...
//
// Each call runs in a forked child, which makes it with no Go code around it (i386 through
// `int $0x80`, x32 through `syscall` with bit 30 set in the number) and exits with its
// errno. One line per call: "ABI CALL: ESCAPED (the call succeeded)", "ABI CALL: refused:
// errno N (...)" or "ABI CALL: killed by SIGNAL". Pointer arguments live below 4 GiB, as
// the 32-bit ABIs need.
package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// forkCall is in call_amd64.s.
func forkCall(abi, nr, a0, a1, a2, a3, a4, a5 uintptr, sigdfl unsafe.Pointer) (pid uintptr)

// ABIs, as forkCall takes them.
const (
	abi64 = iota
	abiI386
	abiX32
)

const x32Bit = 0x40000000

// numbers are each call's number in the x86_64, i386 and x32 tables (arch/x86/entry/
// syscalls); -1 where the ABI has none.
var numbers = map[string][3]int{
	"getpid":           {39, 20, 39},
	"chmod":            {90, 15, 90},
	"fchmodat":         {268, 306, 268},
	"creat":            {85, 8, 85},
	"openat":           {257, 295, 257},
	"mknodat":          {259, 297, 259},
	"setxattr":         {188, 226, 188},
	"socket":           {41, 359, 41},
	"socketcall":       {-1, 102, -1},
	"ptrace":           {101, 26, 521},
	"process_vm_readv": {310, 347, 539},
	"keyctl":           {250, 288, 250},
	"add_key":          {248, 286, 248},
	"io_uring_setup":   {425, 425, 425},
	"io_setup":         {206, 245, 543},
	"bpf":              {321, 357, 321},
	"perf_event_open":  {298, 336, 298},
	"userfaultfd":      {323, 374, 323},
	"unshare":          {272, 310, 272},
	"setns":            {308, 346, 308},
	"mount":            {165, 21, 165},
	"clone":            {56, 120, 56},
}

const (
	atFdcwd      = ^uintptr(99) // -100
	setuidMode   = 0o4755
	oWronlyCreat = 0o1 | 0o100
	sIFIFO       = 0o010000
	cloneNewuser = 0x10000000
	sigchld      = 17
)

// probe is one named attempt: the call it makes and its arguments.
type probe struct {
	call string
	args func(arg string, m *lowMem) ([6]uintptr, error)
}

var probes = map[string]probe{
	"getpid":          {"getpid", noArgs},
	"chmod-setuid":    {"chmod", func(a string, m *lowMem) ([6]uintptr, error) { return [6]uintptr{m.str(a), setuidMode}, nil }},
	"fchmodat-setuid": {"fchmodat", func(a string, m *lowMem) ([6]uintptr, error) { return [6]uintptr{atFdcwd, m.str(a), setuidMode}, nil }},
	"creat-setuid":    {"creat", func(a string, m *lowMem) ([6]uintptr, error) { return [6]uintptr{m.str(a), setuidMode}, nil }},
	"openat-setuid": {"openat", func(a string, m *lowMem) ([6]uintptr, error) {
		return [6]uintptr{atFdcwd, m.str(a), oWronlyCreat, setuidMode}, nil
	}},
	"mknod-setuid": {"mknodat", func(a string, m *lowMem) ([6]uintptr, error) {
		return [6]uintptr{atFdcwd, m.str(a), sIFIFO | 0o4644}, nil
	}},
	// A file capability (struct vfs_cap_data, revision 2: CAP_SETUID permitted, effective).
	"setcap": {"setxattr", func(a string, m *lowMem) ([6]uintptr, error) {
		v := make([]byte, 20)
		binary.LittleEndian.PutUint32(v[0:], 0x02000001)
		binary.LittleEndian.PutUint32(v[4:], 1<<7)
		return [6]uintptr{m.str(a), m.str("security.capability"), m.bytes(v), 20}, nil
	}},
	"socket": {"socket", func(a string, m *lowMem) ([6]uintptr, error) {
		f, t, err := pair(a)
		return [6]uintptr{f, t}, err
	}},
	"socketcall": {"socketcall", func(a string, m *lowMem) ([6]uintptr, error) {
		f, t, err := pair(a)
		v := make([]byte, 12)
		binary.LittleEndian.PutUint32(v[0:], uint32(f))
		binary.LittleEndian.PutUint32(v[4:], uint32(t))
		return [6]uintptr{1 /* SYS_SOCKET */, m.bytes(v)}, err
	}},
	"ptrace-attach": {"ptrace", func(a string, m *lowMem) ([6]uintptr, error) {
		pid, err := strconv.Atoi(a)
		return [6]uintptr{16 /* PTRACE_ATTACH */, uintptr(pid)}, err
	}},
	"process_vm_readv": {"process_vm_readv", func(a string, m *lowMem) ([6]uintptr, error) {
		pid, err := strconv.Atoi(a)
		return [6]uintptr{uintptr(pid)}, err
	}},
	"keyctl": {"keyctl", func(string, *lowMem) ([6]uintptr, error) {
		return [6]uintptr{1 /* KEYCTL_JOIN_SESSION_KEYRING */}, nil
	}},
	"add_key": {"add_key", func(a string, m *lowMem) ([6]uintptr, error) {
		return [6]uintptr{m.str("user"), m.str("airlock-probe"), m.str("x"), 1, ^uintptr(1) /* KEY_SPEC_PROCESS_KEYRING */}, nil
	}},
	"io_uring_setup": {"io_uring_setup", func(a string, m *lowMem) ([6]uintptr, error) {
		return [6]uintptr{1, m.bytes(make([]byte, 120))}, nil
	}},
	"io_setup": {"io_setup", func(a string, m *lowMem) ([6]uintptr, error) {
		return [6]uintptr{1, m.bytes(make([]byte, 8))}, nil
	}},
	"bpf": {"bpf", func(a string, m *lowMem) ([6]uintptr, error) {
		attr := make([]byte, 72) // BPF_MAP_CREATE of a one-entry array
		binary.LittleEndian.PutUint32(attr[0:], 2)
		binary.LittleEndian.PutUint32(attr[4:], 4)
		binary.LittleEndian.PutUint32(attr[8:], 4)
		binary.LittleEndian.PutUint32(attr[12:], 1)
		return [6]uintptr{0, m.bytes(attr), 72}, nil
	}},
	"perf_event_open": {"perf_event_open", func(a string, m *lowMem) ([6]uintptr, error) {
		attr := make([]byte, 128) // PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK
		binary.LittleEndian.PutUint32(attr[0:], 1)
		binary.LittleEndian.PutUint32(attr[4:], 128)
		return [6]uintptr{m.bytes(attr), 0, ^uintptr(0), ^uintptr(0)}, nil
	}},
	"userfaultfd":   {"userfaultfd", noArgs},
	"unshare-user":  {"unshare", func(string, *lowMem) ([6]uintptr, error) { return [6]uintptr{cloneNewuser}, nil }},
	"setns":         {"setns", noArgs},
	"clone-newuser": {"clone", func(string, *lowMem) ([6]uintptr, error) { return [6]uintptr{cloneNewuser | sigchld}, nil }},
	"mount-tmpfs": {"mount", func(a string, m *lowMem) ([6]uintptr, error) {
		return [6]uintptr{m.str("none"), m.str(a), m.str("tmpfs")}, nil
	}},
}

func noArgs(string, *lowMem) ([6]uintptr, error) { return [6]uintptr{}, nil }

func pair(a string) (uintptr, uintptr, error) {
	f, t, _ := strings.Cut(a, ",")
	fam, err1 := strconv.Atoi(f)
	typ, err2 := strconv.Atoi(t)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("want FAMILY,TYPE, got %q", a)
	}
	return uintptr(fam), uintptr(typ), nil
}

// lowMem is memory below 4 GiB (MAP_32BIT) for pointer arguments.
type lowMem struct {
	b   []byte
	off int
}

func (m *lowMem) bytes(v []byte) uintptr {
	p := uintptr(unsafe.Pointer(&m.b[m.off]))
	m.off += copy(m.b[m.off:], v)
	m.off = (m.off + 7) &^ 7
	return p
}

func (m *lowMem) str(s string) uintptr { return m.bytes(append([]byte(s), 0)) }

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: sysprobe x86_64|i386|x32 CALL[=ARG] ...")
		os.Exit(2)
	}
	abi, ok := map[string]int{"x86_64": abi64, "i386": abiI386, "x32": abiX32}[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "sysprobe: unknown ABI %q\n", os.Args[1])
		os.Exit(2)
	}
	b, err := syscall.Mmap(-1, 0, 1<<16, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_32BIT)
	if err != nil {
		fmt.Fprintf(os.Stderr, "sysprobe: map low memory: %v\n", err)
		os.Exit(2)
	}
	for _, item := range os.Args[2:] {
		m := &lowMem{b: b, off: 64} // the first 64 bytes: a zeroed struct sigaction
		clear(b)
		fmt.Printf("%s %s: %s\n", os.Args[1], item, run(abi, item, m))
	}
}

func run(abi int, item string, m *lowMem) string {
	name, arg, _ := strings.Cut(item, "=")
	p, ok := probes[name]
	if !ok {
		return "unknown probe"
	}
	nr := numbers[p.call][abi]
	if nr < 0 {
		return "no such call in this ABI"
	}
	if abi == abiX32 {
		nr |= x32Bit
	}
	args, err := p.args(arg, m)
	if err != nil {
		return err.Error()
	}
	r := forkCall(uintptr(abi), uintptr(nr), args[0], args[1], args[2], args[3], args[4], args[5], unsafe.Pointer(&m.b[0]))
	if pid := int(r); pid < 0 {
		return fmt.Sprintf("fork failed: %v", syscall.Errno(-pid))
	}
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(int(r), &ws, 0, nil)
		if err != syscall.EINTR {
			break
		}
	}
	switch {
	case ws.Signaled():
		return "killed by " + sigName(ws.Signal())
	case ws.ExitStatus() == 0:
		return "ESCAPED (the call succeeded)"
	default:
		e := syscall.Errno(ws.ExitStatus())
		return fmt.Sprintf("refused: errno %d (%v)", int(e), e)
	}
}

func sigName(s syscall.Signal) string {
	if n, ok := map[syscall.Signal]string{syscall.SIGSYS: "SIGSYS", syscall.SIGSEGV: "SIGSEGV",
		syscall.SIGILL: "SIGILL", syscall.SIGBUS: "SIGBUS", syscall.SIGKILL: "SIGKILL"}[s]; ok {
		return n
	}
	return s.String()
}
