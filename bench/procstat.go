package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of utime and stime in /proc/PID/stat: USER_HZ, fixed at 100 in the
// Linux ABI whatever the kernel's HZ.
const userHZ = 100

// ProcCPU returns the user+system CPU time process pid has used so far, its exited
// threads included.
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read cpu of pid %d: %w", pid, err)
	}
	// Fields after the command (which may hold spaces) start at field 3 (state).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat: no command field", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	// utime and stime are fields 14 and 15 of the whole line, 12 and 13 here.
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * (time.Second / userHZ), nil
}

// ProcMem returns the resident set size now and its peak (VmRSS, VmHWM) in bytes.
func ProcMem(pid int) (rss, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parse /proc/%d/status %s: %q", pid, k, v)
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	return rss, peak, nil
}

// ResetPeak sets process pid's VmHWM back to its current RSS (clear_refs "5", Linux ≥ 4.0),
// so that the next ProcMem reports the peak since now.
func ResetPeak(pid int) error {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		return fmt.Errorf("reset peak RSS of pid %d: %w", pid, err)
	}
	return nil
}

// RestMem is a process's resident memory split by kind (/proc/PID/status): RSS is VmRSS,
// Anon is RssAnon (heap, stacks: what the process itself allocated), File is RssFile
// (pages of its binary and libraries, shared with the page cache and reclaimable; how many
// are mapped depends on what the kernel had cached and read ahead).
type RestMem struct {
	RSS, Anon, File int64 // bytes
}

// ProcRestMem reads process pid's RestMem.
func ProcRestMem(pid int) (RestMem, error) {
	var m RestMem
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	fields := map[string]*int64{"VmRSS": &m.RSS, "RssAnon": &m.Anon, "RssFile": &m.File}
	seen := 0
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		dst := fields[k]
		if !ok || dst == nil {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return m, fmt.Errorf("parse /proc/%d/status %s: %q", pid, k, v)
		}
		*dst = kb << 10
		seen++
	}
	if seen != len(fields) {
		return m, fmt.Errorf("parse /proc/%d/status: VmRSS, RssAnon or RssFile missing", pid)
	}
	return m, nil
}
