package e2etest

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The syscall boundary, as the escape suites of both backends check it with e2e/sysprobe:
// every call through a foreign ABI (i386 `int $0x80`, x32) kills the process, the native
// calls the sandbox has no business making are refused with their errno, and no file the
// sandbox writes to the workspace carries a set-user-ID or set-group-ID bit or a file
// capability.

// BuildSysprobe builds e2e/sysprobe static into a new directory (readable by everyone, for
// container users) and returns its path.
func BuildSysprobe(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv(sysprobeEnv); bin != "" { // built by RunRootless's parent
		return bin
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sysprobe")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/airlock-proxy/airlock/e2e/sysprobe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build sysprobe: %v\n%s", err, out)
	}
	return bin
}

// SyscallProbe is one call the sandbox refuses: sysprobe's CALL[=ARG] ($P is a sibling
// process's pid; ABI becomes the ABI's name, so that each has its own files), the errno
// of its refusal through the native ABI, and whether it succeeds on the host (a control
// proving that the probe can tell).
type SyscallProbe struct {
	Item        string
	Errno       int
	HostControl bool
}

// SyscallProbes are the calls the 64-bit escape tests refuse, each also made through i386
// and x32.
var SyscallProbes = []SyscallProbe{
	{"chmod-setuid=f-ABI", 1, true},
	{"fchmodat-setuid=f-ABI", 1, true},
	{"creat-setuid=creat-ABI", 1, true},
	{"openat-setuid=open-ABI", 1, true},
	{"mknod-setuid=fifo-ABI", 1, true},
	{"setcap=f-ABI", 95, true},
	{"socket=40,1", 97, false}, // AF_VSOCK: not confined by the network namespace
	{"socket=40,2", 97, false},
	{"socket=16,3", 97, true},  // AF_NETLINK
	{"socket=17,3", 97, false}, // AF_PACKET
	{"ptrace-attach=$P", 1, false},
	{"process_vm_readv=$P", 1, false},
	{"keyctl", 1, true},
	{"add_key", 1, true},
	{"io_uring_setup", 1, true},
	{"io_setup", 38, true},
	{"bpf", 1, false},
	{"perf_event_open", 1, false},
	{"userfaultfd", 1, false},
	{"unshare-user", 1, true},
	{"setns", 1, false},
	{"clone-newuser", 1, true},
	{"mount-tmpfs=/tmp", 1, false},
}

// ProbeScript runs sysprobe (at bin) through abi for every probe (and extra items), in dir,
// beside a sibling process to trace.
func ProbeScript(bin, dir, abi string, extra ...string) string {
	items := append([]string{"getpid"}, extra...)
	for _, p := range SyscallProbes {
		items = append(items, strings.ReplaceAll(p.Item, "ABI", abi))
	}
	return "cd " + dir + " && touch f-" + abi + " && sleep 30 & P=$!; sleep 0.2; " + bin + " " + abi + " " +
		strings.Join(items, " ") + "; kill $P"
}

// ProbeScripts is ProbeScript for each ABI (i386 also through socketcall).
func ProbeScripts(bin, dir string) []string {
	return []string{
		ProbeScript(bin, dir, "x86_64"),
		ProbeScript(bin, dir, "i386", "socketcall=40,1", "socketcall=16,3"),
		ProbeScript(bin, dir, "x32"),
	}
}

// ProbeResults maps "ABI ITEM" to its outcome in sysprobe's output (a numeric argument,
// the sibling's pid, as $P).
func ProbeResults(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			if call, arg, ok := strings.Cut(k, "="); ok && strings.Trim(arg, "0123456789") == "" {
				k = call + "=$P"
			}
			m[k] = v
		}
	}
	return m
}

// abiAvailable says whether the host kernel runs calls of abi (getpid through it
// succeeds), and the outcome.
func abiAvailable(bin, abi string) (bool, string) {
	out, _ := exec.Command(bin, abi, "getpid").CombinedOutput()
	res := ProbeResults(string(out))[abi+" getpid"]
	return strings.HasPrefix(res, "ESCAPED"), res
}

// CheckSyscallResults checks sysprobe's results in a sandbox: the probe runs (getpid
// through the native ABI), every refused call gets its errno, and through i386 and x32
// every call is killed by SIGSYS — x32 on any x86_64 kernel (seccomp sees the call before
// the kernel finds it has no x32 table), i386 where the kernel runs it; an ABI the kernel
// cannot run is reported, and then only that nothing got through is checked.
func CheckSyscallResults(t testing.TB, bin string, results map[string]string) {
	t.Helper()
	if got := results["x86_64 getpid"]; !strings.HasPrefix(got, "ESCAPED") {
		t.Fatalf("the probe does not work in the sandbox: getpid %q (%d results)", got, len(results))
	}
	for _, p := range SyscallProbes {
		key := "x86_64 " + strings.ReplaceAll(p.Item, "ABI", "x86_64")
		want := "refused: errno " + strconv.Itoa(p.Errno) + " "
		if got := results[key]; !strings.HasPrefix(got, want) {
			t.Errorf("%s: %q, want %q...", key, got, want)
		}
	}
	for _, abi := range []string{"i386", "x32"} {
		avail, how := abiAvailable(bin, abi)
		mustKill := avail || abi == "x32"
		switch {
		case !avail && abi == "x32":
			t.Logf("the x32 ABI is unavailable on this kernel (getpid through it on the host: %s); "+
				"seccomp still sees x32 calls before the kernel refuses them, so the kills checked here are the filter's", how)
		case !avail:
			t.Logf("the %s ABI is unavailable on this kernel (getpid through it on the host: %s): only that nothing "+
				"got through is checked here; the suite's test of the installed filter (CheckInstalledFilter) runs "+
				"every %s number through it", abi, how, abi)
		}
		n := 0
		for key, res := range results {
			if !strings.HasPrefix(key, abi+" ") {
				continue
			}
			n++
			switch {
			case strings.HasPrefix(res, "ESCAPED"):
				t.Errorf("%s: %s", key, res)
			case mustKill && res != "killed by SIGSYS":
				t.Errorf("%s: %s, want killed by SIGSYS", key, res)
			}
		}
		if n <= len(SyscallProbes) {
			t.Errorf("%s: %d results, want %d", abi, n, len(SyscallProbes)+1)
		}
	}
}

// SyscallHostControl runs the probes marked as controls on the host, in a directory of its
// own: each must succeed there.
func SyscallHostControl(t testing.TB, bin string) {
	t.Helper()
	var items []string
	for _, p := range SyscallProbes {
		if p.HostControl {
			items = append(items, strings.ReplaceAll(p.Item, "ABI", "x86_64"))
		}
	}
	HostControl(t, "cd "+t.TempDir()+" && touch f-x86_64 && "+bin+" x86_64 "+strings.Join(items, " ")+
		" | grep -v ESCAPED || echo ESCAPED")
}

// CheckNoSetIDOnHost walks the workspace on the host: no regular file, FIFO or directory
// carries a set-user-ID or set-group-ID bit (but directories under allowSGID, which inherit
// the set-group-ID bit of a host directory: a directory cannot be run), and nothing
// carries a file capability.
func CheckNoSetIDOnHost(t testing.TB, ws string, allowSGID ...string) {
	t.Helper()
	err := filepath.WalkDir(ws, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(ws, path)
		fi, err := os.Lstat(path)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return nil
		}
		setid := fi.Mode() & (fs.ModeSetuid | fs.ModeSetgid)
		if fi.IsDir() && fi.Mode()&fs.ModeSetuid == 0 {
			for _, a := range allowSGID {
				if rel == a || strings.HasPrefix(rel, a+"/") {
					setid = 0
				}
			}
		}
		if setid != 0 {
			t.Errorf("host file %s has mode %v", rel, fi.Mode())
		}
		if _, err := unix.Lgetxattr(path, "security.capability", make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
			t.Errorf("host file %s: security.capability: %v, want none", rel, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// SetIDArchive is a tar archive whose entries carry set-user-ID and set-group-ID bits.
func SetIDArchive(t testing.TB) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range []*tar.Header{
		{Name: "t/", Typeflag: tar.TypeDir, Mode: 0o2775},
		{Name: "t/suid", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 3},
		{Name: "t/sgid", Typeflag: tar.TypeReg, Mode: 0o2755, Size: 3},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte("#!\n")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
