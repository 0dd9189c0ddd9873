package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// SmokescreenModule is the smokescreen version compared against.
const SmokescreenModule = "github.com/stripe/smokescreen@v0.1.0"

// pprofEnv names the variable that makes a bench build of airlock serve net/http/pprof.
const pprofEnv = "AIRLOCK_BENCH_PPROF"

// pprofOverlay is added to cmd/airlock (with `go build -overlay`, the tree is not changed)
// for the profiling build only: when AIRLOCK_BENCH_PPROF is set, it serves net/http/pprof
// on that loopback address. The shipped binary has no such code.
const pprofOverlay = `package main

import (
	"net/http"
	"net/http/pprof"
	"os"
)

func init() {
	addr := os.Getenv("` + pprofEnv + `")
	if addr == "" {
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	go func() { _ = http.ListenAndServe(addr, mux) }()
}
`

// BuildOptions say where to build and what to look for.
type BuildOptions struct {
	Dir       string    // temporary directory for binaries
	Airlock   string    // a prebuilt airlock binary; "" builds ./cmd/airlock
	Pprof     bool      // build airlock with the pprof overlay
	Log       io.Writer // progress
	NoInstall bool      // do not `go install` smokescreen when it is not found
}

// PrepareTools builds airlock and the goproxy baseline from this module and finds
// smokescreen and squid. A missing peer is not an error: its Why field says what to do.
func PrepareTools(ctx context.Context, o BuildOptions) (Tools, error) {
	var t Tools
	root, err := moduleRoot(ctx)
	if err != nil {
		return t, err
	}
	t.Goproxy = filepath.Join(o.Dir, "goproxy-baseline")
	fmt.Fprintln(o.Log, "building ./bench/cmd/goproxy-baseline")
	if err := goCmd(ctx, root, nil, "build", "-o", t.Goproxy, "./bench/cmd/goproxy-baseline"); err != nil {
		return t, err
	}
	t.Airlock = o.Airlock
	if t.Airlock == "" || o.Pprof {
		t.Airlock = filepath.Join(o.Dir, "airlock")
		args := []string{"build", "-o", t.Airlock}
		if o.Pprof {
			overlay, err := writeOverlay(o.Dir, root)
			if err != nil {
				return t, err
			}
			args = append(args, "-overlay", overlay)
		}
		fmt.Fprintf(o.Log, "building ./cmd/airlock (pprof overlay: %v)\n", o.Pprof)
		if err := goCmd(ctx, root, nil, append(args, "./cmd/airlock")...); err != nil {
			return t, err
		}
	}
	t.Smokescreen, t.SmokescreenWhy = findSmokescreen(ctx, o)
	if p, err := exec.LookPath("squid"); err == nil {
		t.Squid = p
	} else if _, err := os.Stat("/usr/sbin/squid"); err == nil {
		t.Squid = "/usr/sbin/squid"
	} else {
		t.SquidWhy = "squid is not installed (apt-get install -y squid)"
	}
	return t, nil
}

func writeOverlay(dir, root string) (string, error) {
	src := filepath.Join(dir, "zz_bench_pprof.go")
	if err := os.WriteFile(src, []byte(pprofOverlay), 0o644); err != nil {
		return "", err
	}
	m := map[string]map[string]string{"Replace": {filepath.Join(root, "cmd", "airlock", "zz_bench_pprof.go"): src}}
	b, _ := json.Marshal(m)
	path := filepath.Join(dir, "overlay.json")
	return path, os.WriteFile(path, b, 0o644)
}

func findSmokescreen(ctx context.Context, o BuildOptions) (path, why string) {
	if p, err := exec.LookPath("smokescreen"); err == nil {
		return p, ""
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "airlock-bench", "bin")
	p := filepath.Join(bin, "smokescreen")
	if _, err := os.Stat(p); err == nil {
		return p, ""
	}
	if o.NoInstall {
		return "", "smokescreen not found (GOBIN=DIR go install " + SmokescreenModule + ", put it on PATH)"
	}
	fmt.Fprintf(o.Log, "installing %s into %s\n", SmokescreenModule, bin)
	// Outside this module, so that its dependencies do not touch our go.mod.
	if err := goCmd(ctx, os.TempDir(), []string{"GOBIN=" + bin}, "install", SmokescreenModule); err != nil {
		return "", fmt.Sprintf("go install %s failed: %v", SmokescreenModule, err)
	}
	return p, ""
}

func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run airlock-bench inside the airlock module (go run ./bench/cmd/airlock-bench)")
	}
	return filepath.Dir(mod), nil
}

func goCmd(ctx context.Context, dir string, env []string, args ...string) error {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}
