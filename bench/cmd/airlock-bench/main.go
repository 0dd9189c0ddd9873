// Command airlock-bench measures airlock beside plain goproxy, smokescreen and squid on
// loopback and writes a Markdown table. Run it from the repository root:
//
//	go run ./bench/cmd/airlock-bench -out bench/results.md
//
// See docs/performance.md for what it measures and what each column means.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-proxy/airlock/bench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "airlock-bench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		o    bench.Options
		rows string
		conc string
		out  string
		list bool
	)
	flag.DurationVar(&o.Duration, "duration", 2*time.Second, "measured time of each run (one row, one concurrency, one round)")
	flag.DurationVar(&o.Warmup, "warmup", 200*time.Millisecond, "unmeasured time before each run")
	flag.IntVar(&o.Rounds, "rounds", 3, "interleaved rounds; the table shows medians")
	flag.StringVar(&conc, "c", "1,64", "concurrencies (closed-loop clients), comma-separated")
	flag.StringVar(&rows, "rows", "", "regexp: measure only rows whose ID (peer/workload, see -list) matches")
	flag.BoolVar(&list, "list", false, "list the row IDs and exit")
	flag.StringVar(&o.AuditFsync, "audit-fsync", "group", "airlock's audit log fsync: group (airlock's default), always, interval, never, or off (no audit log)")
	flag.StringVar(&o.Airlock, "airlock", "", "use this airlock binary instead of building ./cmd/airlock")
	flag.BoolVar(&o.NoInstall, "no-install", false, "do not go install smokescreen when it is not found (its row is skipped)")
	flag.StringVar(&o.ProfileDir, "pprof", "", "write a CPU profile of one airlock row's process into this directory (builds airlock with a bench-only pprof overlay)")
	flag.StringVar(&o.ProfileRow, "pprof-row", "airlock-policy/http-small", "the row -pprof profiles, at the highest concurrency")
	flag.DurationVar(&o.ProfileDuration, "pprof-duration", 10*time.Second, "how long -pprof profiles")
	flag.IntVar(&o.Scale, "scale", 0, "also hold this many idle keep-alive connections through airlock and measure active requests beside them (e.g. 10000)")
	flag.StringVar(&out, "out", "", "write the Markdown report to this file (default: stdout only)")
	flag.StringVar(&o.WorkDir, "workdir", "", "run the processes in this directory and keep it (logs, configs); default a temporary one, removed")
	flag.Parse()

	if list {
		for _, r := range bench.DefaultRows() {
			fmt.Printf("%-34s %s\n", r.ID(), r.Label)
		}
		return nil
	}
	for _, f := range strings.Split(conc, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c < 1 {
			return fmt.Errorf("-c %q: want positive integers separated by commas", conc)
		}
		o.Concurrency = append(o.Concurrency, c)
	}
	if rows != "" {
		re, err := regexp.Compile(rows)
		if err != nil {
			return fmt.Errorf("-rows: %w", err)
		}
		o.Filter = re
	}
	o.Log = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rep, err := bench.Run(ctx, o)
	if err != nil {
		return err
	}
	command := "go run ./bench/cmd/airlock-bench " + strings.Join(os.Args[1:], " ")
	if err := rep.WriteMarkdown(os.Stdout, strings.TrimSpace(command)); err != nil {
		return err
	}
	if out != "" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		if err := rep.WriteMarkdown(f, strings.TrimSpace(command)); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "done in %s\n", rep.Elapsed.Round(time.Second))
	return nil
}
