package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ProfileResult is a CPU profile of one airlock process under load.
type ProfileResult struct {
	Row     string
	File    string // the pprof profile
	TopFile string // `go tool pprof -top` of it
	Top     string
	RPS     float64
}

// profile drives row at the highest concurrency for o.ProfileDuration while airlock's
// bench-only pprof endpoint records a CPU profile.
func profile(ctx context.Context, o Options, row Row, p *Process, up *Upstream) (*ProfileResult, error) {
	if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
		return nil, fmt.Errorf("profile dir: %w", err)
	}
	secs := max(1, int(o.ProfileDuration/time.Second))
	name := strings.ReplaceAll(row.ID(), "/", "-")
	res := &ProfileResult{Row: row.ID(), File: filepath.Join(o.ProfileDir, name+".pprof")}
	errc := make(chan error, 1)
	during := func() {
		errc <- fetchProfile(ctx, "http://"+p.PprofAddr+fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), res.File)
	}
	po := o
	po.Duration = time.Duration(secs)*time.Second + 500*time.Millisecond // the profile ends inside the load
	fmt.Fprintf(o.Log, "profiling %s for %ds\n", row.ID(), secs)
	s, err := measure(ctx, po, row, p, up, slicesMax(o.Concurrency), during)
	if err != nil {
		return nil, fmt.Errorf("profile load: %w", err)
	}
	if err := <-errc; err != nil {
		return nil, err
	}
	res.RPS = s.Result.RPS()
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=35", res.File).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go tool pprof -top: %w\n%s", err, out)
	}
	res.Top = string(out)
	res.TopFile = strings.TrimSuffix(res.File, ".pprof") + ".top.txt"
	if err := os.WriteFile(res.TopFile, out, 0o644); err != nil {
		return nil, err
	}
	return res, nil
}

func fetchProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetch profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("fetch profile: %s: %s", resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("fetch profile: %w", err)
	}
	return f.Close()
}

func (p *ProfileResult) writeMarkdown(b *strings.Builder) {
	fmt.Fprintf(b, "\n### CPU profile of %s (%.0f req/s while profiled)\n\n`%s` (`go tool pprof -http=: %s`); top functions:\n\n```\n%s```\n",
		p.Row, p.RPS, p.File, p.File, p.Top)
}

func slicesMax(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
