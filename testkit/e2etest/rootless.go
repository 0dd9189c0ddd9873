package e2etest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// Rootless mode: with AIRLOCK_E2E_ROOTLESS=1, a suite's TestMain (through RunRootless) runs
// its own test binary again as RootlessUser, a real unprivileged user it creates if need
// be, so that its native sandboxes are rootless ones (sandbox/native's rootless_linux.go).
// Tests that need root skip themselves there as anywhere else.
const (
	RootlessEnv   = "AIRLOCK_E2E_ROOTLESS"
	RootlessUser  = "airlock-test"
	airlockBinEnv = "AIRLOCK_E2E_BIN"      // the airlock command RunRootless's parent built
	sysprobeEnv   = "AIRLOCK_E2E_SYSPROBE" // and e2e/sysprobe (the user has no Go toolchain)
)

// RootfsEnv names a directory the escape and client suites run their sandboxes on as a
// root of their own (an image's root file system) instead of the host's; scripts/test.sh
// makes one from the host's /usr.
const RootfsEnv = "AIRLOCK_E2E_ROOTFS"

// Rootfs is the root AIRLOCK_E2E_ROOTFS names for the suites' sandboxes ("": the host's).
func Rootfs() string { return os.Getenv(RootfsEnv) }

// Rootless reports whether this test process runs the rootless mode (not root).
func Rootless() bool { return os.Geteuid() != 0 }

// RunRootless, as root with AIRLOCK_E2E_ROOTLESS=1, creates RootlessUser (useradd) when it
// does not exist, builds the airlock command, copies the test binary where that user can
// run it, runs it as that user with the same arguments from the same directory, and
// returns its exit status and true. Otherwise it returns false and TestMain runs the tests
// itself.
func RunRootless() (int, bool) {
	if os.Getenv(RootlessEnv) != "1" || os.Geteuid() != 0 {
		return 0, false
	}
	code, err := runRootless()
	if err != nil {
		fmt.Fprintf(os.Stderr, "rootless mode: %v\n", err)
		return 1, true
	}
	return code, true
}

func runRootless() (int, error) {
	u, err := user.Lookup(RootlessUser)
	if err != nil {
		if out, err := exec.Command("useradd", "--create-home", "--shell", "/bin/sh", RootlessUser).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("useradd %s: %v\n%s", RootlessUser, err, out)
		}
		if u, err = user.Lookup(RootlessUser); err != nil {
			return 0, err
		}
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	bin, err := airlockBinary()
	if err != nil {
		return 0, err
	}
	defer RemoveAirlockBinary()
	test := filepath.Join(filepath.Dir(bin), filepath.Base(os.Args[0]))
	if err := copyExecutable(test, "/proc/self/exe"); err != nil {
		return 0, err
	}
	probe := filepath.Join(filepath.Dir(bin), "sysprobe")
	build := exec.Command("go", "build", "-o", probe, "github.com/airlock-proxy/airlock/e2e/sysprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("build sysprobe: %v\n%s", err, out)
	}
	cmd := exec.Command(test, os.Args[1:]...)
	// From the binaries' directory (0755), not the package's: the checkout may be one the
	// user cannot enter (a clone in `mktemp -d`); the rootless suites read nothing there.
	cmd.Dir = filepath.Dir(bin)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	path := "/usr/local/bin:/usr/bin:/bin"
	if gobin, err := exec.LookPath("go"); err == nil { // for the stdlib-only clients suites build
		path = filepath.Dir(gobin) + ":" + path
	}
	cmd.Env = []string{"HOME=" + u.HomeDir, "USER=" + RootlessUser, "PATH=" + path,
		"TMPDIR=" + os.TempDir(), airlockBinEnv + "=" + bin, sysprobeEnv + "=" + probe}
	if r := Rootfs(); r != "" { // the suites on an image root, rootless too
		cmd.Env = append(cmd.Env, RootfsEnv+"="+r)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, err
}

func copyExecutable(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
