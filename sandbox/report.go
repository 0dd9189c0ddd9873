package sandbox

import (
	"github.com/airlock-proxy/airlock/internal/event"
	"slices"
	"time"
)

// Report is the JSON run report of a sandbox (`airlock sandbox run --report F`).
type Report struct {
	SandboxID      string            `json:"sandbox_id"`
	Labels         map[string]string `json:"labels,omitempty"`
	PolicyRevision string            `json:"policy_revision,omitempty"`
	Start          time.Time         `json:"start"`
	End            time.Time         `json:"end,omitzero"`
	Command        []string          `json:"command,omitempty"`
	ExitCode       int               `json:"exit_code"`
	Signal         string            `json:"signal,omitempty"`
	TimedOut       bool              `json:"timed_out"`
	Runs           int               `json:"runs"`
	Usage          Usage             `json:"usage"`
	Requests       RequestCounts     `json:"requests"`
	Changes        []Change          `json:"changes,omitempty"`
	// ChangesIncomplete, when set, says why Changes may lack changes (a bound of
	// PostRunLimits reached, a part of the tree that could not be read, with the paths).
	ChangesIncomplete string `json:"changes_incomplete,omitempty"`
	// Removed are workspace paths the host's git would run, read as configuration, follow
	// or block on, that the sandbox left in a read-write workspace, moved aside (renamed
	// to NAME.airlock-removed-RANDOM beside it) or, for links and special files, removed
	// when it ended: what it made where git reads and nothing was at start (a commondir, a
	// hooks directory...), the config, hooks, config.worktree and commondir of git
	// directories that were not there at start, .git files pointing at them, links and
	// FIFOs, sockets or devices in git directories.
	Removed []string `json:"removed,omitempty"`
	// SweepFailed, when set, says what of the above could not be taken away (paths
	// named): do not run git in the workspace before checking them.
	SweepFailed string `json:"sweep_failed,omitempty"`
	// Unenforced says what of the sandbox's bounds did not hold (a rootless native
	// sandbox: no memory or CPU limit, no usage peaks), one phrase each.
	Unenforced []string `json:"unenforced,omitempty"`
}

// RequestCounts counts the proxy's decisions on this sandbox's requests.
type RequestCounts struct {
	Allowed  int `json:"allowed"`
	Denied   int `json:"denied"`
	Approved int `json:"approved"`
	// DeniedDestinations lists each refused host once, in order of first refusal.
	DeniedDestinations []string `json:"denied_destinations,omitempty"`
}

// maxDeniedDestinations bounds the report's list of refused hosts.
const maxDeniedDestinations = 100

// Observe counts one proxy decision on a request of this sandbox: "allow", "deny" or
// "approve"/"approved" (held and then approved); any other outcome (a rejected or expired
// approval, an error) counts as denied. The proxy's auditor calls it.
func (s *Sandbox) Observe(decision event.Decision, host string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := &s.report.Requests
	switch decision {
	case event.DecisionAllow:
		r.Allowed++
	case event.DecisionApprove, event.DecisionApproved:
		r.Approved++
	default:
		r.Denied++
		if host != "" && !slices.Contains(r.DeniedDestinations, host) && len(r.DeniedDestinations) < maxDeniedDestinations {
			r.DeniedDestinations = append(r.DeniedDestinations, host)
		}
	}
}

// Report returns the run report so far; after Close it is complete.
func (s *Sandbox) Report() Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.report
	r.Requests.DeniedDestinations = slices.Clone(r.Requests.DeniedDestinations)
	r.Changes = slices.Clone(r.Changes)
	r.Unenforced = slices.Clone(r.Unenforced)
	return r
}

// addRun records a run's outcome: the report describes the last command, with peaks over
// all of them.
func (r *Report) addRun(args []string, res Result) {
	r.Runs++
	r.Command = slices.Clone(args)
	r.ExitCode, r.Signal, r.TimedOut = res.ExitCode, res.Signal, res.TimedOut
	r.Usage.PeakMemory = max(r.Usage.PeakMemory, res.Usage.PeakMemory)
	r.Usage.Pids = max(r.Usage.Pids, res.Usage.Pids)
	r.Usage.CPU += res.Usage.CPU
	r.Usage.OOMKilled = r.Usage.OOMKilled || res.Usage.OOMKilled
}
