package native_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"unsafe"

	"github.com/airlock-proxy/airlock/sandbox/native"
	"golang.org/x/sys/unix"
)

// noClone3Env makes TestMain refuse clone3 to the whole test process and all it starts
// (ENOSYS, as a container's seccomp profile or a kernel before 5.3 does).
const noClone3Env = "AIRLOCK_TEST_NO_CLONE3"

// refuseClone3 installs a seccomp filter on every thread: clone3 fails with ENOSYS.
func refuseClone3() error {
	const retAllow, retErrno = 0x7fff0000, 0x00050000
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.SYS_CLONE3, Jt: 0, Jf: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: retErrno | uint32(unix.ENOSYS)},
		{Code: unix.BPF_RET | unix.BPF_K, K: retAllow},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog))); e != 0 {
		return fmt.Errorf("seccomp: %w", e)
	}
	if _, _, e := unix.Syscall(unix.SYS_CLONE3, 0, 0, 0); !errors.Is(e, unix.ENOSYS) {
		return fmt.Errorf("clone3 after the filter: %v, want ENOSYS", e)
	}
	return nil
}

// Where clone3 is refused, the C holder forks each command's spawner as before and moves
// its first process into the run's v2 group: commands still run in their groups.
func TestRunGroupWithoutClone3(t *testing.T) {
	if os.Getenv(noClone3Env) != "" {
		t.Skip("the outer test")
	}
	if os.Geteuid() != 0 || !native.CStages || native.CgroupV2Mount() == "" {
		t.Skip("needs root, the C holder and a v2 hierarchy (run groups)")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCommandsRunInTheSandboxCgroups$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), noClone3Env+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("commands' groups with clone3 refused: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestCommandsRunInTheSandboxCgroups") {
		t.Fatalf("TestCommandsRunInTheSandboxCgroups did not run and pass with clone3 refused:\n%s", out)
	}
}
