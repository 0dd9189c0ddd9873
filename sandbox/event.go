package sandbox

import (
	"context"
	"time"

	"github.com/airlock-proxy/airlock/internal/event"
)

// EventKind names a sandbox lifecycle event: the audit record kinds of internal/event.
type EventKind = event.Kind

// The lifecycle events of a sandbox, in the order they come: one start, a run per command,
// one end.
const (
	EventStart = event.KindSandboxStart // the backend created it
	EventRun   = event.KindSandboxRun   // a command ended
	EventEnd   = event.KindSandboxEnd   // Close ended it
)

// Event is one lifecycle event of a sandbox, for audit. It carries ids, limits and outcomes,
// never secret values; the fields of another kind are zero.
type Event struct {
	Kind      EventKind
	SandboxID string
	Labels    map[string]string // nil when the sandbox has none

	// EventStart: the workspace and the limits the sandbox got.
	Workspace     string
	WorkspaceMode WorkspaceMode
	Memory        int64
	Pids          int64
	CPUs          float64
	Timeout       time.Duration

	// EventRun, and EventEnd for the last command: how it ended.
	Command    string // the program (EventRun only)
	ExitCode   int
	Signal     string // EventRun only
	TimedOut   bool
	PeakMemory int64 // EventRun only

	// EventEnd: the proxy's decisions on the sandbox's requests, what the workspace sweep
	// took away, and why Close failed (empty when it did not).
	Requests RequestCounts
	Removed  []string
	Error    string
}

// EventFunc receives a sandbox's lifecycle events.
type EventFunc func(ctx context.Context, ev Event)
