package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// Machine describes where a run happened.
type Machine struct {
	Kernel   string
	CPUs     int
	CPUModel string
	LoadAvg  string // /proc/loadavg at the start: the three load averages
	Go       string
}

// ReadMachine reads the kernel, CPU count and model, and the load average.
func ReadMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// versions asks each peer for its version, best effort.
func versions(ctx context.Context, t Tools) map[string]string {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v := map[string]string{"smokescreen": SmokescreenModule}
	if t.Squid != "" {
		out, _ := exec.CommandContext(ctx, t.Squid, "-v").Output()
		if line, _, _ := bytes.Cut(out, []byte("\n")); len(line) > 0 {
			v["squid"] = strings.TrimSpace(string(line))
		}
	}
	if out, err := exec.CommandContext(ctx, t.Airlock, "--version").Output(); err == nil {
		v["airlock"] = strings.TrimSpace(string(out))
	}
	return v
}
