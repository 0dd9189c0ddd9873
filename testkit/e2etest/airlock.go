package e2etest

import (
	"fmt"
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
	airlockOnce.Do(func() {
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
	if airlockErr != nil {
		t.Fatal(airlockErr)
	}
	return airlockBin
}

// RemoveAirlockBinary removes what AirlockBinary built, if it did: for TestMain, after the
// tests.
func RemoveAirlockBinary() {
	if airlockBin != "" {
		os.RemoveAll(filepath.Dir(airlockBin))
	}
}
