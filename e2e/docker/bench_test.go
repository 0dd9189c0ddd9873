//go:build e2e

package docker_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
	"github.com/airlock-proxy/airlock/sandbox/native"
)

// BenchmarkCreateExecDestroy compares sandbox create → first exec → destroy for the native
// and the Docker backend in one run:
//
//	go test -tags e2e -run '^$' -bench CreateExecDestroy -benchtime 5x ./e2e/docker/
func BenchmarkCreateExecDestroy(b *testing.B) {
	backends := []struct {
		name string
		new  func(testing.TB) sandbox.Backend
	}{
		{"native", func(testing.TB) sandbox.Backend {
			return &native.Native{StateDir: filepath.Join(os.TempDir(), "airlock-e2e-bench")}
		}},
		{"docker", func(tb testing.TB) sandbox.Backend { return newBackend(tb, docker.Options{Mode: docker.ModeNetNS}) }},
	}
	for _, bk := range backends {
		b.Run(bk.name, func(b *testing.B) {
			backend := bk.new(b)
			ctx := context.Background()
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				s, err := sandbox.New(ctx, sandbox.Options{Backend: backend})
				if err != nil {
					b.Fatal(err)
				}
				if res, err := s.Run(ctx, sandbox.Command{Args: []string{"/bin/true"}}); err != nil || res.ExitCode != 0 {
					b.Fatalf("run: %v exit %d", err, res.ExitCode)
				}
				if err := s.Close(ctx); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
		})
	}
}
