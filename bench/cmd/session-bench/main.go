// Command session-bench measures sandbox sessions through the admin API of a running
// server, side by side with bubblewrap: create (request sent to 201 received) and exec of
// `true` in a live native sandbox (request sent to the final frame received), against
// `bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp
// true` started from Go. It needs root (native sandboxes) and bwrap (Debian: bubblewrap).
//
//	go run ./bench/cmd/session-bench -n 200
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/session"
)

func main() {
	native.Init()
	n := flag.Int("n", 200, "execs measured (creates: n/4)")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "session-bench:", err)
		os.Exit(1)
	}
}

func run(n int) error {
	ctx := context.Background()
	if _, err := exec.LookPath("bwrap"); err != nil {
		return fmt.Errorf("bwrap not found (apt-get install bubblewrap): %w", err)
	}
	eng, err := rego.New(ctx, rego.Options{}) // the shipped policy: its exec phase allows
	if err != nil {
		return err
	}
	state, err := os.MkdirTemp("", "session-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	m, err := session.New(session.Options{
		Base:    sandbox.Options{Backend: &native.Native{StateDir: filepath.Join(state, "native")}},
		Decider: eng, StateDir: filepath.Join(state, "sessions"),
	}, nil)
	if err != nil {
		return err
	}
	defer m.Close(ctx)
	r := chi.NewRouter()
	m.Routes(r)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: r}
	go srv.Serve(ln)
	defer srv.Close()
	c := &session.Client{BaseURL: "http://" + ln.Addr().String(), Token: "unused"}

	// Create: request sent to 201 received; each sandbox is deleted outside the timing.
	var creates []time.Duration
	for i := 0; i < max(n/4, 5); i++ {
		t0 := time.Now()
		info, err := c.Create(ctx, session.Spec{})
		d := time.Since(t0)
		if err != nil {
			return err
		}
		creates = append(creates, d)
		if _, err := c.Delete(ctx, info.ID); err != nil {
			return err
		}
	}
	info, err := c.Create(ctx, session.Spec{})
	if err != nil {
		return err
	}
	defer c.Delete(ctx, info.ID)
	var execs, bwraps []time.Duration
	bw := []string{"--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "true"}
	for i := 0; i < n+10; i++ { // interleaved, so that both see the same machine load
		t0 := time.Now()
		res, err := c.Exec(ctx, info.ID, session.ExecRequest{Argv: []string{"true"}}, nil, nil, nil)
		d := time.Since(t0)
		if err != nil || res.ExitCode != 0 {
			return fmt.Errorf("exec true: %+v %v", res, err)
		}
		t1 := time.Now()
		if out, err := exec.Command("bwrap", bw...).CombinedOutput(); err != nil {
			return fmt.Errorf("bwrap: %v: %s", err, out)
		}
		db := time.Since(t1)
		if i >= 10 { // warm-up
			execs, bwraps = append(execs, d), append(bwraps, db)
		}
	}
	ep, bp := pct(execs, 50), pct(bwraps, 50)
	fmt.Printf("| measure | n | p50 | p90 | p99 |\n|---|---|---|---|---|\n")
	row := func(name string, ds []time.Duration) {
		fmt.Printf("| %s | %d | %s | %s | %s |\n", name, len(ds), ms(pct(ds, 50)), ms(pct(ds, 90)), ms(pct(ds, 99)))
	}
	row("session create (POST /v1/sandboxes → 201)", creates)
	row("session exec `true` (POST …/exec → final frame)", execs)
	row("bwrap --unshare-all … true", bwraps)
	fmt.Printf("\nexec p50 / bwrap p50 = %.2f (target ≤ 1.5); create p50 = %s (target ≤ 25 ms)\n", float64(ep)/float64(bp), ms(pct(creates, 50)))
	return nil
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
