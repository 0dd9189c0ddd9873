package main

import (
	"context"
	"strings"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox/native"
)

// TestSessionBackendsRefuse: a docker session where the proxy's host has no Docker daemon,
// or without an image, is refused saying so; an unknown backend names the ones served.
func TestSessionBackendsRefuse(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix://"+t.TempDir()+"/no-docker.sock")
	sb := &sessionBackends{native: &native.Native{}}
	t.Cleanup(func() { _ = sb.close(context.Background()) })
	for _, c := range []struct{ name, image, want string }{
		{"docker", "busybox:latest", "this airlock has no Docker daemon to run docker sandboxes"},
		{"docker", "", "needs an image"},
		{"vm", "", `backend "vm" is not served here; want native, docker or kubernetes`},
	} {
		if _, err := sb.backend(context.Background(), c.name, c.image); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %q: got %v, want %q", c.name, c.image, err, c.want)
		}
	}
	if b, err := sb.backend(context.Background(), "native", ""); err != nil || b != sb.native {
		t.Errorf("native: %v %v", b, err)
	}
}
