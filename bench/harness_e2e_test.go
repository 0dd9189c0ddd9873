//go:build e2e

package bench

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestHarnessSmoke runs the whole harness at tiny settings: airlock and the goproxy baseline
// built from this module and run as processes, squid and smokescreen when present (skipped
// rows are allowed), the scale run with a few hundred idle connections, and a profile.
//
//	go test -tags e2e -run TestHarnessSmoke -count=1 ./bench/
func TestHarnessSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	o := Options{
		Duration: 300 * time.Millisecond, Warmup: 50 * time.Millisecond, Rounds: 1, Concurrency: []int{1, 4},
		Filter:     regexp.MustCompile(`^(direct|goproxy|airlock-policy|squid)/(http-small|https-small)$`),
		NoInstall:  true,
		ProfileDir: t.TempDir(), ProfileDuration: time.Second,
		Scale:   200,
		WorkDir: t.TempDir(),
		Log:     testLog{t},
	}
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	measured := map[string]bool{}
	for _, rr := range rep.Rows {
		if rr.Failed != "" {
			t.Errorf("%s failed: %s", rr.Row.ID(), rr.Failed)
		}
		if rr.Skipped != "" {
			t.Logf("%s skipped: %s", rr.Row.ID(), rr.Skipped)
			continue
		}
		for _, c := range o.Concurrency {
			if len(rr.Samples[c]) != 1 || rr.Samples[c][0].Result.Requests == 0 {
				t.Errorf("%s c=%d: got %d samples, want one with requests", rr.Row.ID(), c, len(rr.Samples[c]))
				continue
			}
			if s := rr.Samples[c][0]; rr.Row.Peer != PeerDirect && (s.PeakRSS <= 0) {
				t.Errorf("%s c=%d: peak RSS %d, want > 0", rr.Row.ID(), c, s.PeakRSS)
			}
		}
		measured[rr.Row.ID()] = true
	}
	for _, id := range []string{"goproxy/http-small", "airlock-policy/http-small", "goproxy/https-small", "airlock-policy/https-small"} {
		if !measured[id] {
			t.Errorf("row %s was not measured", id)
		}
	}
	if rep.Profile == nil || !strings.Contains(rep.Profile.Top, "flat") {
		t.Errorf("profile = %+v, want a pprof top listing", rep.Profile)
	}
	if rep.Scale == nil || len(rep.Scale.Peers) != 2 || rep.Scale.Peers[1].RSSWithIdle <= rep.Scale.Peers[1].RSSBefore/2 {
		t.Errorf("scale = %+v, want both proxies measured", rep.Scale)
	}
	var b strings.Builder
	if err := rep.WriteMarkdown(&b, "go test"); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`\| http-small \| airlock, shipped policy \+ credential \| [0-9.k]+ \([0-9.]+×\) \|`).MatchString(b.String()) {
		t.Errorf("report lacks the airlock row with its ratio:\n%s", b.String())
	}
	t.Log("\n" + b.String())
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
