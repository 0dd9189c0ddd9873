package e2etest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	airlockOnce sync.Once
	airlockBin  string
	airlockErr  error
)

// AirlockBinary builds the airlock command once per test binary, as it is released (with
// cgo), into a directory everyone may read (for container and tmux users), and returns its
// path. The directory outlives the tests' own temporary directories, which the build is
// shared across.
func AirlockBinary(t testing.TB) string {
	t.Helper()
	bin, err := airlockBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func airlockBinary() (string, error) {
	airlockOnce.Do(func() {
		if bin := os.Getenv(airlockBinEnv); bin != "" { // built by RunRootless's parent
			airlockBin = bin
			return
		}
		dir, err := os.MkdirTemp("", "airlock-e2e-bin-")
		if err != nil {
			airlockErr = err
			return
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			airlockErr = err
			return
		}
		airlockBin = filepath.Join(dir, "airlock")
		if out, err := exec.Command("go", "build", "-o", airlockBin, "github.com/airlock-proxy/airlock/cmd/airlock").CombinedOutput(); err != nil {
			airlockErr = fmt.Errorf("build airlock: %v\n%s", err, out)
		}
	})
	return airlockBin, airlockErr
}

// RemoveAirlockBinary removes what AirlockBinary built, if it did: for TestMain, after the
// tests.
func RemoveAirlockBinary() {
	if airlockBin != "" && os.Getenv(airlockBinEnv) == "" {
		os.RemoveAll(filepath.Dir(airlockBin))
	}
}

// FreeAddr is a loopback address (127.0.0.1:PORT) free at the time of the call, for an
// airlock listener a test starts as a separate process.
func FreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
