package native

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/seccomp"
)

// seccompPrograms are the sandbox policy (sandbox/seccomp) compiled for this machine, as
// the kernel takes it: an array of struct sock_filter (8 bytes each, native byte order),
// without and with AIO. The parent compiles each once and hands it to each sandbox's
// holder, which installs it in every command just before exec.
var seccompPrograms = [2]func() ([]byte, error){
	sync.OnceValues(func() ([]byte, error) { return compileSeccomp(seccomp.Options{}) }),
	sync.OnceValues(func() ([]byte, error) { return compileSeccomp(seccomp.Options{AllowAIO: true}) }),
}

// seccompProgram is the program for a sandbox with options o.
func seccompProgram(o sandbox.Options) ([]byte, error) {
	if o.AllowAIO {
		return seccompPrograms[1]()
	}
	return seccompPrograms[0]()
}

func compileSeccomp(o seccomp.Options) ([]byte, error) {
	a, err := seccomp.Native()
	if err != nil {
		return nil, err
	}
	raw, err := seccomp.Sandbox(o).BPF(a)
	if err != nil {
		return nil, fmt.Errorf("compile seccomp filter: %w", err)
	}
	b := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		b = binary.NativeEndian.AppendUint16(b, r.Op)
		b = append(b, r.Jt, r.Jf)
		b = binary.NativeEndian.AppendUint32(b, r.K)
	}
	return b, nil
}

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
