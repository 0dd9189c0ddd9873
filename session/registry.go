package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/internal/procstat"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
)

// registry keeps one record per live session in a directory shared by the airlocks of a
// machine (or a shared volume): which process owns the session. Another replica that is
// asked about it names the owner; an airlock that restarts finds its previous run's
// sessions there (Adopt).
type registry struct {
	dir   string
	owner string
	pid   int
	start uint64
}

// record is a session's file in the registry.
type record struct {
	ID      string    `json:"id"`
	Owner   string    `json:"owner"`
	PID     int       `json:"pid"`
	Start   uint64    `json:"start"`
	Backend string    `json:"backend"`
	Created time.Time `json:"created"`
}

func openRegistry(dir, owner string) (*registry, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sessions.state_dir %s: %w", dir, err)
	}
	pid := os.Getpid()
	if owner == "" {
		h, _ := os.Hostname()
		owner = fmt.Sprintf("%s:%d", h, pid)
	}
	return &registry{dir: dir, owner: owner, pid: pid, start: procstat.StartTime(pid)}, nil
}

func (r *registry) path(id string) string { return filepath.Join(r.dir, id+".json") }

func (r *registry) read(id string) (record, bool) {
	b, err := os.ReadFile(r.path(id))
	if err != nil {
		return record{}, false
	}
	var rec record
	if json.Unmarshal(b, &rec) != nil {
		return record{}, false
	}
	return rec, true
}

func (r *registry) mine(rec record) bool { return rec.PID == r.pid && rec.Start == r.start }

// alive reports whether the record's owner process still runs.
func alive(rec record) bool {
	return rec.PID > 0 && procstat.StartTime(rec.PID) == rec.Start && rec.Start != 0
}

// claim records id as this process's; a live session of another process is a
// NotOwnerError.
func (r *registry) claim(id, backend string) error {
	if rec, ok := r.read(id); ok && !r.mine(rec) && alive(rec) {
		return &NotOwnerError{ID: id, Owner: rec.Owner}
	} else if ok && r.mine(rec) {
		return fmt.Errorf("%w: sandbox %s already exists", ErrConflict, id)
	}
	b, _ := json.Marshal(record{ID: id, Owner: r.owner, PID: r.pid, Start: r.start, Backend: backend, Created: time.Now().UTC()})
	tmp := r.path(id) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("record session: %w", err)
	}
	if err := os.Rename(tmp, r.path(id)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("record session: %w", err)
	}
	return nil
}

func (r *registry) release(id string) {
	if rec, ok := r.read(id); ok && r.mine(rec) {
		os.Remove(r.path(id))
	}
}

// ownerOf names the live owner of id when it is another process.
func (r *registry) ownerOf(id string) (string, bool) {
	rec, ok := r.read(id)
	if !ok || r.mine(rec) || !alive(rec) {
		return "", false
	}
	return rec.Owner, true
}

// orphans are the records whose owner process is gone.
func (r *registry) orphans() []record {
	ents, _ := os.ReadDir(r.dir)
	var out []record
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || identity.CheckID(id) != nil {
			continue
		}
		if rec, ok := r.read(id); ok && !alive(rec) && !r.mine(rec) {
			out = append(out, rec)
		}
	}
	return out
}

// Adopt takes over the sessions an earlier airlock process left in the state directory.
// A native sandbox cannot outlive the airlock that holds it (its processes die with it),
// so none can be re-adopted alive: what it left (cgroups, mounts, uid slot, state) is
// removed with the native backend's Cleanup, a report saying so is written beside its
// record (ID.report.json), and the session is answered as ended. It returns the ids it
// ended.
func (m *Manager) Adopt(ctx context.Context) ([]string, error) {
	var ended []string
	var errs []error
	orphans := m.reg.orphans()
	if len(orphans) == 0 {
		return nil, nil
	}
	if n, ok := m.opts.Base.Backend.(*native.Native); ok && os.Geteuid() == 0 {
		if err := n.Cleanup(ctx); err != nil {
			errs = append(errs, fmt.Errorf("remove what earlier sandboxes left: %w", err))
		}
	}
	now := m.opts.Now()
	for _, rec := range orphans {
		reason := "airlock restarted: a " + rec.Backend + " sandbox ends with the airlock process that holds it, so it was destroyed"
		rep := sandbox.Report{SandboxID: rec.ID, Start: rec.Created, End: now}
		b, _ := json.MarshalIndent(struct {
			sandbox.Report
			EndReason string `json:"end_reason"`
			Owner     string `json:"previous_owner"`
		}{rep, reason, rec.Owner}, "", "  ")
		if err := os.WriteFile(filepath.Join(m.reg.dir, rec.ID+".report.json"), append(b, '\n'), 0o600); err != nil {
			errs = append(errs, fmt.Errorf("write the report of %s: %w", rec.ID, err))
		}
		if err := os.Remove(m.reg.path(rec.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		m.mu.Lock()
		m.ended[rec.ID] = &tombstone{info: Info{ID: rec.ID, State: StateEnded, Owner: rec.Owner, Backend: rec.Backend,
			Created: rec.Created, Ended: now, EndReason: reason}, report: rep, execs: map[string]*ExecResult{}}
		m.endedList = append(m.endedList, rec.ID)
		m.mu.Unlock()
		m.log.Warn("a sandbox session of an earlier airlock run was destroyed", "sandbox", rec.ID, "previous_owner", rec.Owner)
		ended = append(ended, rec.ID)
	}
	return ended, errors.Join(errs...)
}
