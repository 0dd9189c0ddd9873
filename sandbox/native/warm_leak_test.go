package native_test

import (
	"context"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
)

func warmGoroutines() int {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	return strings.Count(string(buf[:n]), "native.startWarming.func")
}

// The red team's: no warming outlives its sandbox: concurrent Creates, Close racing the first
// Run, and a Create that fails after the warming has started.
func TestWarmingsEndWithTheirSandboxes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root")
	}
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx := context.Background()
			s, err := sandbox.New(ctx, sandbox.Options{Backend: &native.Native{StateDir: testState}})
			if err != nil {
				t.Error(err)
				return
			}
			if i%2 == 0 {
				go func() { _, _ = s.Run(ctx, sandbox.Command{Args: []string{"sleep", "5"}}) }()
				time.Sleep(time.Duration(i) * time.Millisecond)
			}
			_ = s.Close(ctx)
		}(i)
	}
	// A Create that fails after its cgroups (and warming) are made: a workspace that is a file.
	_, err := sandbox.New(context.Background(), sandbox.Options{Backend: &native.Native{StateDir: testState}, Workspace: "/etc/hostname"})
	if err == nil {
		t.Error("a file as the workspace was accepted")
	}
	wg.Wait()
	if n := warmGoroutines(); n != 0 {
		t.Errorf("%d warmings still running after every sandbox closed", n)
	}
}
