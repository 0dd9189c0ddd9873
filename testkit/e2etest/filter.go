package e2etest

import (
	"encoding/binary"
	"runtime"
	"testing"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// CheckInstalledFilter reads back the seccomp filter of a sandboxed process
// (PTRACE_SECCOMP_GET_FILTER; the process is stopped meanwhile) and runs it on
// golang.org/x/net/bpf's VM: every i386 and x32 call number must be killed, whatever the
// kernel can run (a kernel that runs no i386 cannot show it with real calls), and a few
// native calls must get the allowlist's answers. x86_64 only.
func CheckInstalledFilter(t testing.TB, pid int) {
	t.Helper()
	vm := installedFilter(t, pid)
	const (
		auditI386   = 0x40000003
		auditX86_64 = 0xc000003e
		killThread  = 0x00000000 // what libseccomp's bad-architecture default amounts to
		killProcess = 0x80000000
		allow       = 0x7fff0000
		errno       = 0x00050000
	)
	killed := func(r uint32) bool { return r == killThread || r == killProcess }
	for nr := uint32(0); nr < 600; nr++ {
		if r := vm.run(t, auditI386, nr, [6]uint64{}); !killed(r) {
			t.Fatalf("i386 call %d: the installed filter returns %#x, want a kill", nr, r)
		}
		if r := vm.run(t, auditX86_64, 0x40000000|nr, [6]uint64{}); !killed(r) {
			t.Fatalf("x32 call %d: the installed filter returns %#x, want a kill", nr, r)
		}
	}
	for _, c := range []struct {
		nr   uint32
		args [6]uint64
		want uint32
	}{
		{39, [6]uint64{}, allow},               // getpid
		{90, [6]uint64{0, 0o755}, allow},       // chmod
		{90, [6]uint64{0, 0o4755}, errno | 1},  // chmod, set-user-ID
		{41, [6]uint64{40, 1}, errno | 97},     // socket(AF_VSOCK)
		{101, [6]uint64{16, 1}, errno | 1},     // ptrace
		{425, [6]uint64{}, errno | 1},          // io_uring_setup
		{206, [6]uint64{}, errno | 38},         // io_setup
		{188, [6]uint64{}, errno | 95},         // setxattr
		{56, [6]uint64{0x10000011}, errno | 1}, // clone(CLONE_NEWUSER)
		{435, [6]uint64{}, errno | 38},         // clone3
	} {
		if r := vm.run(t, auditX86_64, c.nr, c.args); r != c.want {
			t.Errorf("x86_64 call %d %#o: the installed filter returns %#x, want %#x", c.nr, c.args[:2], r, c.want)
		}
	}
}

type filterVM struct{ vm *bpf.VM }

// installedFilter reads the last seccomp filter installed in process pid.
func installedFilter(t testing.TB, pid int) *filterVM {
	t.Helper()
	runtime.LockOSThread() // ptrace requests come from the tracing thread
	defer runtime.UnlockOSThread()
	if err := unix.PtraceAttach(pid); err != nil {
		t.Fatalf("attach to the sandboxed process %d: %v", pid, err)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		t.Fatal(err)
	}
	defer unix.PtraceDetach(pid)
	n, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(pid), 0, 0, 0, 0)
	if e != 0 || n == 0 {
		t.Fatalf("PTRACE_SECCOMP_GET_FILTER: %d instructions, %v", n, e)
	}
	prog := make([]unix.SockFilter, n)
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(pid), 0,
		uintptr(unsafe.Pointer(&prog[0])), 0, 0); e != 0 {
		t.Fatalf("PTRACE_SECCOMP_GET_FILTER: %v", e)
	}
	raw := make([]bpf.RawInstruction, len(prog))
	for i, f := range prog {
		raw[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}
	}
	insns, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("the filter has instructions x/net/bpf cannot run")
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatal(err)
	}
	return &filterVM{vm: vm}
}

// run evaluates one call (the VM reads big-endian words: each 32-bit word of seccomp_data
// is written big-endian where the little-endian kernel has it).
func (f *filterVM) run(t testing.TB, audit, nr uint32, args [6]uint64) uint32 {
	t.Helper()
	var b [64]byte
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], audit)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[20+8*i:], uint32(a>>32))
	}
	r, err := f.vm.Run(b[:])
	if err != nil {
		t.Fatal(err)
	}
	return uint32(r)
}
