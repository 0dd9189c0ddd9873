// Package procstat reads a process's start time, which with its pid names the process
// unambiguously (a pid alone can be reused).
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// StartTime returns field 22 of /proc/PID/stat (start time in clock ticks since boot), or 0
// when the process is gone or the file cannot be read.
func StartTime(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces and parentheses
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(fields[19], 10, 64)
	return n
}
