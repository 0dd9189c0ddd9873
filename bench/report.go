package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Summary is a row's figures: medians over rounds.
type Summary struct {
	RPS           map[int]float64 // by concurrency
	P50, P90, P99 map[int]time.Duration
	// CPUPer10k is the proxy's CPU seconds per 10,000 requests at the highest concurrency.
	CPUPer10k float64
	PeakRSS   int64 // the most over all runs of the row
	Errors    uint64
}

// Summarize takes the median of each figure over the rounds.
func (rr *RowResult) Summarize() Summary {
	s := Summary{RPS: map[int]float64{}, P50: map[int]time.Duration{}, P90: map[int]time.Duration{}, P99: map[int]time.Duration{}}
	top := 0
	for c, samples := range rr.Samples {
		var rps, p50, p90, p99 []float64
		for _, x := range samples {
			rps = append(rps, x.Result.RPS())
			p50 = append(p50, float64(x.Result.Hist.Quantile(0.50)))
			p90 = append(p90, float64(x.Result.Hist.Quantile(0.90)))
			p99 = append(p99, float64(x.Result.Hist.Quantile(0.99)))
			s.PeakRSS = max(s.PeakRSS, x.PeakRSS)
			s.Errors += x.Result.Errors
		}
		s.RPS[c] = median(rps)
		s.P50[c] = time.Duration(median(p50))
		s.P90[c] = time.Duration(median(p90))
		s.P99[c] = time.Duration(median(p99))
		top = max(top, c)
	}
	var cpu []float64
	for _, x := range rr.Samples[top] {
		if x.Result.Requests > 0 {
			cpu = append(cpu, x.CPU.Seconds()/float64(x.Result.Requests)*10000)
		}
	}
	s.CPUPer10k = median(cpu)
	return s
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// WriteMarkdown writes the table (every figure with its ratio to the plain goproxy row of
// the same workload), the settings it was made with, and the scale and profile results.
func (r *Report) WriteMarkdown(w io.Writer, command string) error {
	var b strings.Builder
	o := r.Options
	fmt.Fprintf(&b, "Produced by `%s` on %s: %d CPUs (%s), Linux %s, %s, load average at start %s; "+
		"%d interleaved rounds of %s measured (+%s warm-up) per row and concurrency; figures are medians over rounds. "+
		"airlock audit log fsync: %s.\n\n",
		command, r.Started.UTC().Format("2006-01-02 15:04 UTC"), r.Machine.CPUs, r.Machine.CPUModel, r.Machine.Kernel,
		r.Machine.Go, r.Machine.LoadAvg, o.Rounds, o.Duration, o.Warmup, o.AuditFsync)

	base := map[string]Summary{}
	sums := make([]Summary, len(r.Rows))
	for i, rr := range r.Rows {
		sums[i] = rr.Summarize()
		if rr.Row.Peer == PeerGoproxy && rr.Skipped == "" && rr.Failed == "" {
			base[rr.Row.Workload.ID] = sums[i]
		}
	}
	cs := o.Concurrency
	b.WriteString("| workload | path |")
	for _, c := range cs {
		fmt.Fprintf(&b, " c=%d req/s | c=%d p50 | c=%d p90 | c=%d p99 |", c, c, c, c)
	}
	b.WriteString(" CPU s / 10k req | peak RSS |\n|---|---|")
	b.WriteString(strings.Repeat("--:|", 4*len(cs)+2))
	b.WriteString("\n")
	var notes []string
	for i, rr := range r.Rows {
		fmt.Fprintf(&b, "| %s | %s |", rr.Row.Workload.ID, rr.Row.Label)
		if rr.Skipped != "" || len(rr.Samples) == 0 {
			why := rr.Skipped
			if why == "" {
				why = rr.Failed
			}
			b.WriteString(strings.Repeat(" — |", 4*len(cs)+2) + "\n")
			notes = append(notes, fmt.Sprintf("%s: not measured: %s", rr.Row.ID(), firstLine(why)))
			continue
		}
		s := sums[i]
		bs, hasBase := base[rr.Row.Workload.ID]
		isBase := rr.Row.Peer == PeerGoproxy
		ratio := func(v, ref float64) string {
			if !hasBase || isBase || ref == 0 || v == 0 {
				return ""
			}
			return fmt.Sprintf(" (%.2f×)", v/ref)
		}
		for _, c := range cs {
			fmt.Fprintf(&b, " %s%s |", fmtRate(s.RPS[c]), ratio(s.RPS[c], bs.RPS[c]))
			for _, q := range []struct{ v, ref time.Duration }{{s.P50[c], bs.P50[c]}, {s.P90[c], bs.P90[c]}, {s.P99[c], bs.P99[c]}} {
				fmt.Fprintf(&b, " %s%s |", fmtDur(q.v), ratio(float64(q.v), float64(q.ref)))
			}
		}
		if rr.Row.Peer == PeerDirect {
			b.WriteString(" — | — |\n")
		} else {
			fmt.Fprintf(&b, " %.2f%s | %.0f MiB%s |\n", s.CPUPer10k, ratio(s.CPUPer10k, bs.CPUPer10k),
				float64(s.PeakRSS)/(1<<20), ratio(float64(s.PeakRSS), float64(bs.PeakRSS)))
		}
		if s.Errors > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d failed requests (under 1%%)", rr.Row.ID(), s.Errors))
		}
		if rr.Failed != "" {
			notes = append(notes, fmt.Sprintf("%s: stopped: %s", rr.Row.ID(), firstLine(rr.Failed)))
		}
	}
	b.WriteString("\nRatios are to plain goproxy on the same workload (for https-small, plain goproxy intercepting with the same CA code). " +
		"CPU and RSS are the proxy process's own (/proc/PID/stat utime+stime over the measured window at the highest concurrency; " +
		"VmHWM, reset at the start of each run); the client and upstream run in the harness process on the same cores.\n")
	if len(r.Versions) > 0 {
		keys := make([]string, 0, len(r.Versions))
		for k := range r.Versions {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteString("\nVersions:")
		for _, k := range keys {
			fmt.Fprintf(&b, " %s: %s;", k, r.Versions[k])
		}
		b.WriteString("\n")
	}
	writeRestMem(&b, r.Rows)
	for _, n := range notes {
		fmt.Fprintf(&b, "\n- %s", n)
	}
	if len(notes) > 0 {
		b.WriteString("\n")
	}
	if r.Scale != nil {
		r.Scale.writeMarkdown(&b)
	}
	if r.Profile != nil {
		r.Profile.writeMarkdown(&b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func fmtRate(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	}
}

// writeRestMem is the table of each proxy's memory at rest (after start, before load).
func writeRestMem(b *strings.Builder, rows []*RowResult) {
	n := 0
	for _, rr := range rows {
		if rr.Rest == nil {
			continue
		}
		if n == 0 {
			b.WriteString("\n### Memory at rest\n\nEach proxy process after start and " + restSettle.String() +
				" idle, before any load (/proc/PID/status). Anonymous memory (RssAnon) is what the process allocated itself; " +
				"file-backed (RssFile) are pages of its binary and libraries, shared and reclaimable, their number depending on the page cache.\n\n" +
				"| row | RSS | anonymous (RssAnon) | file-backed (RssFile) |\n|---|--:|--:|--:|\n")
		}
		n++
		m := rr.Rest
		fmt.Fprintf(b, "| %s | %.1f MiB | %.1f MiB | %.1f MiB |\n", rr.Row.ID(),
			float64(m.RSS)/(1<<20), float64(m.Anon)/(1<<20), float64(m.File)/(1<<20))
	}
}
