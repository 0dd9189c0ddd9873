//go:build e2e

package docker_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/docker"
)

// atBound runs script in s until it prints a line starting with "DONE"; it returns the
// lines printed before that, and leaves the script running (holding what it took) until
// the test ends.
func atBound(t *testing.T, s *sandbox.Sandbox, script string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Run(ctx, sandbox.Command{Args: []string{"sh", "-c", script}, Stdout: pw, Stderr: pw})
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
		}
	})
	var lines []string
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "DONE") {
			go io.Copy(io.Discard, pr)
			return lines
		}
		lines = append(lines, sc.Text())
	}
	t.Fatalf("the script never finished filling: %q", lines)
	return nil
}

// TestHostBounds: a Docker sandbox's open files (per process, not raisable), terminals
// (its own devpts with a max), tmpfs inodes and /proc are bounded as the native backend's;
// while one sandbox sits at its bounds, the host and a second sandbox are unaffected.
func TestHostBounds(t *testing.T) {
	b := newBackend(t, docker.Options{Mode: docker.ModeNetNS})
	s := newSandbox(t, sandbox.Options{ID: "sbx-docker-bounds", Backend: b, Nofile: 64, Pids: 64, Ptys: 4, Inodes: 200})
	lines := atBound(t, s, `export GOMAXPROCS=1; for i in 1 2 3 4; do `+probe("fill", "fds", "100000", "hold")+` & done
sleep 1; `+probe("fill", "ptys", "1000", "hold")+` & sleep 1; echo DONE; wait`)
	fds, ptys := 0, 0
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 6 || f[0] != "AT-BOUND" {
			continue
		}
		if f[3] != "64" || f[4] != "64" || f[5] != "kept" {
			t.Errorf("open-file limit: %q, want soft and hard 64, not raisable", l)
		}
		if f[1] == "4" && f[2] == fmt.Sprint(int(syscall.ENOSPC)) {
			ptys++
		} else if f[2] == fmt.Sprint(int(syscall.EMFILE)) {
			fds++
		}
	}
	if fds != 4 || ptys != 1 {
		t.Fatalf("want 4 processes at their open-file limit and one at 4 terminals (ENOSPC): %.2000q", lines)
	}
	// The host and a second sandbox are unaffected.
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("the host cannot open a terminal: %v", err)
	}
	ptmx.Close()
	other := newSandbox(t, sandbox.Options{ID: "sbx-docker-bounds-2", Backend: b})
	if out, _ := run(t, other, probe("fill", "ptys", "8")+"; "+probe("fill", "fds", "500")); strings.Count(out, "AT-BOUND 8 0") != 1 || strings.Count(out, "AT-BOUND 500 0") != 1 {
		t.Errorf("a second sandbox cannot open terminals or files: %q", out)
	}
	out, _ := run(t, s, `for d in /tmp "$HOME" /dev/shm; do i=0; while touch "$d/f$i" 2>/dev/null; do i=$((i+1)); [ $i -gt 5000 ] && break; done; echo "$d $i"; done
head -c 100 /proc/cmdline | wc -c; head -c 100 /proc/keys 2>/dev/null | wc -c`)
	for _, d := range []string{"/tmp", "/home/sandbox", "/dev/shm"} {
		n := -1
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == d {
				fmt.Sscan(f[1], &n)
			}
		}
		if n < 150 || n > 200 {
			t.Errorf("%s took %d files, want close to and at most 200:\n%s", d, n, out)
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(out), "0\n0") {
		t.Errorf("/proc/cmdline or /proc/keys readable: %q", out)
	}
}
