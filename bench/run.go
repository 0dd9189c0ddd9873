// Package bench is airlock's load harness: it starts a loopback upstream and, as separate
// processes, airlock and its peers (plain goproxy, smokescreen, squid), drives each with a
// closed-loop keep-alive client at several concurrencies over interleaved rounds, reads each
// proxy's CPU time and peak RSS from /proc, and renders a Markdown table with every figure
// also as a ratio to plain goproxy. See docs/performance.md.
package bench

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// Options configure a Run. Zero values mean the documented defaults.
type Options struct {
	Duration    time.Duration // measured time of each run; default 2s
	Warmup      time.Duration // unmeasured time before each run; default 200ms
	Rounds      int           // interleaved rounds; default 3
	Concurrency []int         // default {1, 64}
	Rows        []Row         // default DefaultRows()
	Filter      *regexp.Regexp
	AuditFsync  string // airlock's audit fsync: group (default, as airlock's own default), always, interval, never, off
	Airlock     string // prebuilt airlock binary; "" builds ./cmd/airlock
	NoInstall   bool   // do not go install smokescreen

	ProfileDir      string // write a CPU profile of ProfileRow's proxy here; "" for none
	ProfileRow      string // row ID; default airlock-policy/http-small
	ProfileDuration time.Duration

	Scale int // with more than 0, also hold this many idle connections through airlock

	WorkDir string    // where processes run; "" makes (and removes) a temporary one
	Log     io.Writer // progress; nil discards
}

func (o *Options) setDefaults() {
	if o.Duration <= 0 {
		o.Duration = 2 * time.Second
	}
	if o.Warmup <= 0 {
		o.Warmup = 200 * time.Millisecond
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{1, 64}
	}
	if o.Rows == nil {
		o.Rows = DefaultRows()
	}
	if o.AuditFsync == "" {
		o.AuditFsync = "group"
	}
	if o.ProfileRow == "" {
		o.ProfileRow = PeerAirlockPolicy + "/" + HTTPSmall.ID
	}
	if o.ProfileDuration <= 0 {
		o.ProfileDuration = 10 * time.Second
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// Sample is one measured run of a row at one concurrency.
type Sample struct {
	Result  *LoadResult
	CPU     time.Duration // the proxy process's CPU time during the run; 0 for direct
	PeakRSS int64         // the proxy's peak RSS during the run; 0 for direct
}

// RowResult is everything measured for one row.
type RowResult struct {
	Row     Row
	Samples map[int][]Sample // by concurrency, one per round
	Skipped string           // why the row was not measured
	Failed  string           // why measuring stopped
	Rest    *RestMem         // the proxy's memory after start, before any load; nil for direct
}

// Report is a Run's outcome.
type Report struct {
	Options  Options
	Started  time.Time
	Elapsed  time.Duration
	Machine  Machine
	Rows     []*RowResult
	Profile  *ProfileResult
	Scale    *ScaleResult
	Versions map[string]string
}

// restSettle is how long the started proxies rest before their memory is read.
const restSettle = time.Second

// readRestMem reads each started proxy's memory at rest: after start and restSettle, before
// any load. A process whose memory cannot be read is reported without it.
func readRestMem(o Options, rows []*RowResult, procs map[string]*Process) {
	if len(procs) == 0 {
		return
	}
	time.Sleep(restSettle)
	for _, rr := range rows {
		p := procs[rr.Row.ID()]
		if p == nil {
			continue
		}
		m, err := ProcRestMem(p.PID())
		if err != nil {
			fmt.Fprintf(o.Log, "%s: memory at rest: %v\n", rr.Row.ID(), err)
			continue
		}
		rr.Rest = &m
	}
}

// Run measures every row.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.setDefaults()
	switch o.AuditFsync {
	case "group", "always", "interval", "never", "off":
	default:
		return nil, fmt.Errorf("audit fsync %q: want group, always, interval, never or off", o.AuditFsync)
	}
	rep := &Report{Options: o, Started: time.Now(), Machine: ReadMachine()}
	dir := o.WorkDir
	if dir == "" {
		d, err := os.MkdirTemp("", "airlock-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	tools, err := PrepareTools(ctx, BuildOptions{Dir: dir, Airlock: o.Airlock, Pprof: o.ProfileDir != "", Log: o.Log, NoInstall: o.NoInstall})
	if err != nil {
		return nil, err
	}
	rep.Versions = versions(ctx, tools)

	up, err := StartUpstream(BenchToken)
	if err != nil {
		return nil, err
	}
	defer up.Close()
	upCAFile := filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(upCAFile, up.CAPEM, 0o644); err != nil {
		return nil, err
	}
	env := peerEnv{upstream: up, upCAFile: upCAFile, tools: tools, fsync: o.AuditFsync, pprof: o.ProfileDir != ""}

	// One process per row, all started first, so that rounds interleave without restarts.
	procs := map[string]*Process{}
	defer func() {
		for _, p := range procs {
			p.Stop()
		}
	}()
	for _, row := range o.Rows {
		if o.Filter != nil && !o.Filter.MatchString(row.ID()) {
			continue
		}
		rr := &RowResult{Row: row, Samples: map[int][]Sample{}}
		rep.Rows = append(rep.Rows, rr)
		if row.Peer == PeerDirect {
			continue
		}
		fmt.Fprintf(o.Log, "starting %s\n", row.ID())
		e := env
		e.dir = filepath.Join(dir, row.Peer+"-"+row.Workload.ID)
		p, err := startPeer(ctx, row.Peer, e)
		if errors.Is(err, errSkipped) {
			rr.Skipped = err.Error()
			fmt.Fprintf(o.Log, "  %s\n", rr.Skipped)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("start %s: %w", row.ID(), err)
		}
		procs[row.ID()] = p
	}

	readRestMem(o, rep.Rows, procs)

	runs := 0
	for _, rr := range rep.Rows {
		if rr.Skipped == "" {
			runs += len(o.Concurrency) * o.Rounds
		}
	}
	fmt.Fprintf(o.Log, "measuring: %d runs of %s + %s warm-up, about %s\n", runs, o.Duration, o.Warmup,
		(time.Duration(runs) * (o.Duration + o.Warmup + 50*time.Millisecond)).Round(time.Second))
	for round := range o.Rounds {
		order := rep.Rows
		if round%2 == 1 { // alternate the order so that no row always runs first or last
			order = reversed(order)
		}
		for _, rr := range order {
			if rr.Skipped != "" || rr.Failed != "" {
				continue
			}
			for _, c := range o.Concurrency {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				s, err := measure(ctx, o, rr.Row, procs[rr.Row.ID()], up, c, nil)
				if err != nil {
					rr.Failed = err.Error()
					fmt.Fprintf(o.Log, "round %d %s c=%d: FAILED: %v\n", round+1, rr.Row.ID(), c, err)
					break
				}
				rr.Samples[c] = append(rr.Samples[c], s)
				fmt.Fprintf(o.Log, "round %d %-32s c=%-3d %8.0f req/s  p50 %-9s p99 %-9s errors %d\n", round+1, rr.Row.ID(), c,
					s.Result.RPS(), fmtDur(s.Result.Hist.Quantile(0.5)), fmtDur(s.Result.Hist.Quantile(0.99)), s.Result.Errors)
			}
		}
	}

	if o.ProfileDir != "" {
		p := procs[o.ProfileRow]
		var row Row
		for _, rr := range rep.Rows {
			if rr.Row.ID() == o.ProfileRow {
				row = rr.Row
			}
		}
		switch {
		case p == nil && o.Filter != nil && !o.Filter.MatchString(o.ProfileRow):
			fmt.Fprintf(o.Log, "profile: row %s is not among -rows; no profile\n", o.ProfileRow)
		case p == nil || p.PprofAddr == "":
			return nil, fmt.Errorf("profile: row %q is not an airlock or goproxy row that was started", o.ProfileRow)
		default:
			rep.Profile, err = profile(ctx, o, row, p, up)
			if err != nil {
				return nil, err
			}
		}
	}
	if o.Scale > 0 {
		rep.Scale, err = scale(ctx, o, env, dir, up)
		if err != nil {
			return nil, err
		}
	}
	rep.Elapsed = time.Since(rep.Started)
	return rep, nil
}

// measure runs one load against row's process and reads the process's CPU and peak RSS.
func measure(ctx context.Context, o Options, row Row, p *Process, up *Upstream, c int, during func()) (Sample, error) {
	l := Load{Concurrency: c, Warmup: o.Warmup, Duration: o.Duration, BodyBytes: row.Workload.Body, Request: row.Workload.Request}
	addr := up.HTTPAddr
	var roots *x509.CertPool
	if row.Workload.Scheme == "https" {
		addr = up.HTTPSAddr
		roots = up.RootCAs()
	}
	l.URL = urlFor(row.Workload.Scheme, addr, row.path())
	if p != nil {
		l.Proxy = p.Addr
		if p.CAPEM != nil && row.Workload.Scheme == "https" {
			roots = x509.NewCertPool()
			roots.AppendCertsFromPEM(p.CAPEM)
		}
	}
	l.RootCAs = roots
	var (
		s          Sample
		cpu0, cpu1 time.Duration
		cpuErr     error
	)
	if p != nil {
		if err := p.Alive(); err != nil {
			return s, err
		}
	}
	// CPU time is read as the measured window opens and closes; the peak RSS is reset
	// then too, and read after.
	onStart := func() {
		if p != nil {
			cpuErr = errors.Join(ResetPeak(p.PID()))
			var err error
			cpu0, err = ProcCPU(p.PID())
			cpuErr = errors.Join(cpuErr, err)
		}
		if during != nil {
			go during()
		}
	}
	onStop := func() {
		if p != nil {
			var err error
			cpu1, err = ProcCPU(p.PID())
			cpuErr = errors.Join(cpuErr, err)
		}
	}
	res, err := l.Run(ctx, onStart, onStop)
	if err != nil {
		return s, err
	}
	if cpuErr != nil {
		return s, cpuErr
	}
	s.Result = res
	if p != nil {
		_, peak, err := ProcMem(p.PID())
		if err != nil {
			return s, err
		}
		s.CPU = cpu1 - cpu0
		s.PeakRSS = peak
	}
	if res.Requests == 0 {
		return s, fmt.Errorf("no request completed: %v", res.FirstErr)
	}
	if res.Errors*100 > res.Requests {
		return s, fmt.Errorf("%d of %d requests failed, first: %v", res.Errors, res.Requests+res.Errors, res.FirstErr)
	}
	return s, nil
}

func reversed[T any](s []T) []T {
	out := make([]T, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}
