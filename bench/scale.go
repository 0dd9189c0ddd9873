package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// ScaleResult compares active-request latency with and without many idle keep-alive
// connections held open beside it, through airlock and, for reference, plain goproxy.
type ScaleResult struct {
	Idle            int
	FDLimit         uint64
	ConcurrencyList []int
	Peers           []*ScalePeer
}

// ScalePeer is one proxy's scale run.
type ScalePeer struct {
	Label                  string
	RSSBefore, RSSWithIdle int64 // VmRSS without and with the idle connections
	PeakRSS                int64 // VmHWM at the end
	OpenTime               time.Duration
	Before, With           map[int]Summary // active requests by concurrency
	// Go runtime figures without and with the idle connections (only for a process that
	// serves pprof, i.e. airlock built for -pprof): stack and heap in use, goroutines.
	GoBefore, GoWith *GoMem
}

// GoMem is what a Go process's runtime says about its memory.
type GoMem struct {
	StackInuse, HeapInuse int64
	Goroutines            int64
}

// RSSPerConn is the extra resident memory per idle connection.
func (s *ScalePeer) RSSPerConn(idle int) float64 {
	return float64(s.RSSWithIdle-s.RSSBefore) / float64(idle)
}

// scale runs the idle-connection test against a fresh plain goproxy and a fresh airlock
// (shipped policy + credential), one after the other.
func scale(ctx context.Context, o Options, env peerEnv, dir string, up *Upstream) (*ScaleResult, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return nil, err
	}
	// Raise the soft limit to the hard one (root here cannot raise the hard limit).
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return nil, fmt.Errorf("raise RLIMIT_NOFILE: %w", err)
	}
	if need := uint64(o.Scale) + 512; need > lim.Cur {
		return nil, fmt.Errorf("scale %d: needs about %d file descriptors, RLIMIT_NOFILE is %d (raise the hard limit with ulimit -Hn as a privileged user)", o.Scale, need, lim.Cur)
	}
	res := &ScaleResult{Idle: o.Scale, FDLimit: lim.Cur, ConcurrencyList: o.Concurrency}
	for _, row := range []Row{
		{Peer: PeerGoproxy, Workload: HTTPSmall, Label: "plain goproxy (baseline)"},
		{Peer: PeerAirlockPolicy, Workload: HTTPSmall, Label: "airlock, shipped policy + credential"},
	} {
		sp, err := scaleOne(ctx, o, env, filepath.Join(dir, "scale-"+row.Peer), up, row)
		if err != nil {
			return nil, err
		}
		res.Peers = append(res.Peers, sp)
	}
	return res, nil
}

// scaleOne starts row's proxy, measures active requests, opens o.Scale idle keep-alive
// connections through it (each has completed one request), and measures again while they
// are held.
func scaleOne(ctx context.Context, o Options, env peerEnv, dir string, up *Upstream, row Row) (*ScalePeer, error) {
	env.dir = dir
	fmt.Fprintf(o.Log, "scale: starting %s\n", row.Peer)
	p, err := startPeer(ctx, row.Peer, env)
	if err != nil {
		return nil, err
	}
	defer p.Stop()
	res := &ScalePeer{Label: row.Label, Before: map[int]Summary{}, With: map[int]Summary{}}

	active := func(into map[int]Summary, label string) error {
		for _, c := range o.Concurrency {
			rr := &RowResult{Row: row, Samples: map[int][]Sample{}}
			for range o.Rounds {
				s, err := measure(ctx, o, row, p, up, c, nil)
				if err != nil {
					return fmt.Errorf("scale %s %s c=%d: %w", row.Peer, label, c, err)
				}
				rr.Samples[c] = append(rr.Samples[c], s)
			}
			into[c] = rr.Summarize()
			fmt.Fprintf(o.Log, "scale %-14s %-10s c=%-3d %8.0f req/s  p50 %-9s p99 %s\n", row.Peer, label, c, into[c].RPS[c], fmtDur(into[c].P50[c]), fmtDur(into[c].P99[c]))
		}
		return nil
	}
	if err := active(res.Before, "no idle"); err != nil {
		return nil, err
	}
	settle()
	if res.RSSBefore, _, err = ProcMem(p.PID()); err != nil {
		return nil, err
	}
	res.GoBefore = readGoMem(ctx, p.PprofAddr)
	fmt.Fprintf(o.Log, "scale: opening %d idle keep-alive connections through %s\n", o.Scale, row.Peer)
	t0 := time.Now()
	conns, err := openIdle(ctx, p.Addr, urlFor("http", up.HTTPAddr, row.path()), o.Scale)
	res.OpenTime = time.Since(t0)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	settle()
	if res.RSSWithIdle, _, err = ProcMem(p.PID()); err != nil {
		return nil, err
	}
	res.GoWith = readGoMem(ctx, p.PprofAddr)
	if o.ProfileDir != "" && p.PprofAddr != "" && os.MkdirAll(o.ProfileDir, 0o755) == nil {
		// The heap as it stands with the idle connections (no GC forced): what each one keeps.
		file := filepath.Join(o.ProfileDir, strings.ReplaceAll(row.ID(), "/", "-")+"-idle.heap.pprof")
		if err := fetchProfile(ctx, "http://"+p.PprofAddr+"/debug/pprof/heap", file); err != nil {
			fmt.Fprintf(o.Log, "scale: heap profile of %s: %v\n", row.Peer, err)
		} else {
			fmt.Fprintf(o.Log, "scale: heap profile with the idle connections: %s\n", file)
		}
	}
	if err := active(res.With, fmt.Sprintf("%d idle", o.Scale)); err != nil {
		return nil, err
	}
	if _, res.PeakRSS, err = ProcMem(p.PID()); err != nil {
		return nil, err
	}
	// The idle connections must still be open: one that the proxy closed reads EOF.
	var closed atomic.Int64
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); err == io.EOF {
				closed.Add(1)
			}
		}()
	}
	wg.Wait()
	if closed.Load() > 0 {
		return nil, fmt.Errorf("scale: %s closed %d of %d idle connections during the run", row.Peer, closed.Load(), len(conns))
	}
	return res, nil
}

// readGoMem reads the runtime.MemStats that /debug/pprof/heap?debug=1 appends (no GC is
// forced) and the goroutine count; nil without a pprof address or on any error.
func readGoMem(ctx context.Context, addr string) *GoMem {
	if addr == "" {
		return nil
	}
	get := func(path string) string {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		return string(b)
	}
	m := &GoMem{}
	heap := get("/debug/pprof/heap?debug=1")
	for _, line := range strings.Split(heap, "\n") {
		var a, b int64
		if n, _ := fmt.Sscanf(line, "# Stack = %d / %d", &a, &b); n == 2 {
			m.StackInuse = a
		}
		if n, _ := fmt.Sscanf(line, "# HeapInuse = %d", &a); n == 1 {
			m.HeapInuse = a
		}
	}
	gr := get("/debug/pprof/goroutine?debug=1")
	if _, err := fmt.Sscanf(gr, "goroutine profile: total %d", &m.Goroutines); err != nil || m.StackInuse == 0 {
		return nil
	}
	return m
}

// settle lets the proxy's heap settle before its RSS is read.
func settle() { time.Sleep(500 * time.Millisecond) }

// openIdle opens n connections to proxy, sends one request on each and reads its response,
// and returns them open and idle.
func openIdle(ctx context.Context, proxy, url string, n int) ([]net.Conn, error) {
	host := strings.TrimPrefix(url, "http://")
	host, _, _ = strings.Cut(host, "/")
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: airlock-bench-idle\r\n\r\n", url, host)
	conns := make([]net.Conn, n)
	var mu sync.Mutex
	next := 0
	g, ctx := errgroup.WithContext(ctx)
	for range 32 {
		g.Go(func() error {
			d := net.Dialer{Timeout: 10 * time.Second}
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n || ctx.Err() != nil {
					return ctx.Err()
				}
				c, err := d.DialContext(ctx, "tcp", proxy)
				if err != nil {
					return fmt.Errorf("idle connection %d: %w", i, err)
				}
				conns[i] = c
				if err := idleRequest(c, req); err != nil {
					return fmt.Errorf("idle connection %d: %w", i, err)
				}
			}
		})
	}
	err := g.Wait()
	var out []net.Conn
	for _, c := range conns {
		if c != nil {
			out = append(out, c)
		}
	}
	return out, err
}

// idleRequest sends one request on c and reads its response. A 503 that keeps the connection
// (airlock refusing under CPU starvation, e.g. a policy timeout) is retried a few times.
func idleRequest(c net.Conn, req string) error {
	br := bufio.NewReader(c)
	for attempt := 1; ; attempt++ {
		if _, err := io.WriteString(c, req); err != nil {
			return err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			return err
		case resp.Close:
			return fmt.Errorf("status %s, and the proxy closes the connection", resp.Status)
		case resp.StatusCode == http.StatusOK:
			return nil
		case resp.StatusCode != http.StatusServiceUnavailable || attempt == 5:
			return fmt.Errorf("status %s after %d attempts", resp.Status, attempt)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *ScaleResult) writeMarkdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n### %d idle keep-alive connections\n\n", s.Idle)
	fmt.Fprintf(b, "Each idle connection completed one request and stays open; a second client measures active requests "+
		"beside them (RLIMIT_NOFILE %d).\n\n", s.FDLimit)
	b.WriteString("| proxy | RSS without → with idle | RSS per idle connection | peak RSS | opened in |\n|---|--:|--:|--:|--:|\n")
	for _, p := range s.Peers {
		fmt.Fprintf(b, "| %s | %.0f → %.0f MiB | %.1f KiB | %.0f MiB | %s |\n", p.Label,
			float64(p.RSSBefore)/(1<<20), float64(p.RSSWithIdle)/(1<<20), p.RSSPerConn(s.Idle)/1024,
			float64(p.PeakRSS)/(1<<20), p.OpenTime.Round(time.Millisecond))
	}
	for _, p := range s.Peers {
		if p.GoBefore != nil && p.GoWith != nil {
			per := func(a, b int64) float64 { return float64(b-a) / float64(s.Idle) / 1024 }
			fmt.Fprintf(b, "\n%s, Go runtime: stack in use %.0f → %.0f MiB (%.1f KiB per connection), heap in use %.0f → %.0f MiB (%.1f KiB per connection), goroutines %d → %d.\n",
				p.Label, float64(p.GoBefore.StackInuse)/(1<<20), float64(p.GoWith.StackInuse)/(1<<20), per(p.GoBefore.StackInuse, p.GoWith.StackInuse),
				float64(p.GoBefore.HeapInuse)/(1<<20), float64(p.GoWith.HeapInuse)/(1<<20), per(p.GoBefore.HeapInuse, p.GoWith.HeapInuse),
				p.GoBefore.Goroutines, p.GoWith.Goroutines)
		}
	}
	b.WriteString("\n| proxy | active requests | req/s without → with | p50 without → with | p99 without → with |\n|---|---|--:|--:|--:|\n")
	r := func(a, b float64) string {
		if a == 0 {
			return ""
		}
		return fmt.Sprintf(" (%.2f×)", b/a)
	}
	for _, p := range s.Peers {
		for _, c := range s.ConcurrencyList {
			x, y := p.Before[c], p.With[c]
			fmt.Fprintf(b, "| %s | c=%d | %s → %s%s | %s → %s%s | %s → %s%s |\n", p.Label, c,
				fmtRate(x.RPS[c]), fmtRate(y.RPS[c]), r(x.RPS[c], y.RPS[c]),
				fmtDur(x.P50[c]), fmtDur(y.P50[c]), r(float64(x.P50[c]), float64(y.P50[c])),
				fmtDur(x.P99[c]), fmtDur(y.P99[c]), r(float64(x.P99[c]), float64(y.P99[c])))
		}
	}
}
