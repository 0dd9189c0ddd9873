package sandbox

import "fmt"

// Paths inside every sandbox, whatever the backend: each backend mounts the same places so
// that the environment New builds is right for it.
const (
	WorkspaceDir = "/workspace"                 // the workspace mount
	HomeDir      = "/home/sandbox"              // $HOME, a private tmpfs
	CABundlePath = "/run/airlock/ca-bundle.pem" // the CA bundle the CA variables point at
)

// DevptsOptions are the mount options of a sandbox's private devpts instance with at most
// max terminals: /dev/ptmx opens it (pts/ptmx), and a terminal belongs to whoever opened it.
// Every backend that gives a sandbox terminals uses them.
func DevptsOptions(max int64) string {
	return fmt.Sprintf("newinstance,ptmxmode=0666,mode=0620,max=%d", max)
}

// MaskedProcFiles are /proc files a sandbox does not need and that tell about the host
// (its kernel command line and configuration, symbols, keys, timers, modules) or reach
// its kernel (sysrq): each is covered by /dev/null, read-only. MaskedProcDirs are covered
// by an empty read-only tmpfs. Paths are relative to /proc; those the host lacks are
// skipped. (runc and Docker mask most of these too.)
var (
	MaskedProcFiles = []string{"cmdline", "config.gz", "kallsyms", "kcore", "keys", "key-users",
		"latency_stats", "timer_list", "timer_stats", "sched_debug", "modules", "sysrq-trigger",
		"kpagecount", "kpageflags", "kpagecgroup", "vmallocinfo", "iomem", "ioports", "slabinfo",
		"buddyinfo", "pagetypeinfo", "zoneinfo"}
	MaskedProcDirs = []string{"acpi", "asound", "scsi", "driver", "bus", "irq"}
)
