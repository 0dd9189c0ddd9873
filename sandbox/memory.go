package sandbox

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Memory is bounded by default: everything the kernel charges to a sandbox's memory cgroup
// (its pages, page tables, kernel objects such as the open files and mappings it holds,
// and on cgroup v1 its socket buffers, against a limit of their own) is then bounded
// whatever the options say.

// DefaultMemory is the memory limit of a sandbox that sets none: a quarter of the host's
// memory, at most 4 GiB and at least 256 MiB (or all of a host smaller than that).
func DefaultMemory() int64 {
	return defaultMemoryFor(hostMemory())
}

func defaultMemoryFor(total int64) int64 {
	const most, least = 4 << 30, 256 << 20
	if total <= 0 {
		return least
	}
	return min(max(total/4, min(least, total)), most)
}

// hostMemory is the host's MemTotal in bytes, 0 when unknown.
func hostMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TCPMemoryLimit is the TCP buffer memory a sandbox with the given memory limit may hold
// (cgroup v1 counts it apart from the memory limit, in memory.kmem.tcp; v2 counts it in
// memory.max): a quarter of the memory limit, at least 16 MiB and at most 1 GiB.
func TCPMemoryLimit(memory int64) int64 {
	return min(max(memory/4, 16<<20), 1<<30)
}

// TCPBufferMax is the largest receive or send buffer of one of a sandbox's TCP sockets
// (the maxima of tcp_rmem and tcp_wmem in its network namespace).
const TCPBufferMax = 2 << 20

// TCPSysctls are the per-network-namespace TCP buffer settings of a sandbox (min, default,
// max, as net.ipv4.tcp_rmem and tcp_wmem take them): the kernel's defaults, with the
// maximum lowered to TCPBufferMax.
var TCPSysctls = map[string]string{
	"net.ipv4.tcp_rmem": fmt.Sprintf("4096 131072 %d", TCPBufferMax),
	"net.ipv4.tcp_wmem": fmt.Sprintf("4096 16384 %d", TCPBufferMax),
}
