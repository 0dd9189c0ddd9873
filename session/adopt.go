package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
)

// add makes sb a live session of m.
func (m *Manager) add(sb *sandbox.Sandbox, spec Spec, backend string, created, expires time.Time, idle, execTimeout time.Duration) *Session {
	now := m.opts.Now()
	s := &Session{m: m, id: sb.ID(), spec: spec, sb: sb, backend: backend, created: created,
		expires: expires, idle: idle, execTimeout: execTimeout, state: StateRunning, lastActive: now,
		execs: map[string]*ExecResult{}, cancels: map[string]context.CancelFunc{}, endDone: make(chan struct{})}
	m.mu.Lock()
	m.sessions[s.id] = s
	m.mu.Unlock()
	return s
}

// Adopt takes over the sessions an earlier airlock process left in the state directory
// (records whose owner process is gone; a record of an airlock with a configured name,
// Options.Owner, only by the airlock of that name). A sandbox whose backend keeps it running without
// its airlock (Docker: sandbox.Adopter) is taken over alive: same id, labels, expiry,
// files and processes; the proxy listens in it again; its idle timeout counts from now.
// A native sandbox cannot outlive the airlock that holds it (its processes die with it),
// so what it left (cgroups, mounts, uid slot, state) is removed with the native
// backend's Cleanup; that one, and any sandbox that could not be taken over, gets a report
// saying so beside its record (ID.report.json) and is answered as ended. It returns the
// ids it took over and those it ended.
func (m *Manager) Adopt(ctx context.Context) (adopted, ended []string, err error) {
	var errs []error
	orphans := m.reg.orphans()
	if len(orphans) == 0 {
		return nil, nil, nil
	}
	if n, ok := m.opts.Base.Backend.(*native.Native); ok {
		if err := n.Cleanup(ctx); err != nil {
			errs = append(errs, fmt.Errorf("remove what earlier sandboxes left: %w", err))
		}
	}
	for _, rec := range orphans {
		if rec.Named && rec.Owner != m.reg.owner {
			m.log.Info("a sandbox session of another, stopped airlock is left for it", "sandbox", rec.ID, "owner", rec.Owner)
			continue
		}
		why := m.readopt(ctx, rec)
		if why == nil {
			m.log.Info("a sandbox session of an earlier airlock run was taken over", "sandbox", rec.ID, "previous_owner", rec.Owner)
			adopted = append(adopted, rec.ID)
			continue
		}
		reason := "airlock restarted: a " + rec.Backend + " sandbox ends with the airlock process that holds it, so it was destroyed"
		if !errors.Is(why, errNotAdoptable) {
			reason = "airlock restarted and could not take the sandbox over, so it was destroyed: " + why.Error()
		}
		errs = append(errs, m.endOrphan(rec, reason))
		ended = append(ended, rec.ID)
	}
	return adopted, ended, errors.Join(errs...)
}

var errNotAdoptable = errors.New("its backend cannot take a sandbox over")

// readopt takes over the sandbox of rec, nil when it did.
func (m *Manager) readopt(ctx context.Context, rec record) error {
	if rec.Backend == "native" || rec.Spec == nil || m.opts.Backend == nil {
		return errNotAdoptable
	}
	spec := *rec.Spec
	spec.ID = rec.ID
	o, backend, _, idle, execTimeout, err := m.options(ctx, spec)
	if err != nil {
		return err
	}
	b, err := m.opts.Backend(ctx, backend, spec.Image)
	if err != nil {
		return err
	}
	if _, ok := b.(sandbox.Adopter); !ok {
		return errNotAdoptable
	}
	o.Backend = b
	sb, err := sandbox.Adopt(context.WithoutCancel(ctx), o)
	if err != nil {
		return err
	}
	if err := m.reg.claim(record{ID: rec.ID, Backend: backend, Created: rec.Created, Spec: &spec, Expires: rec.Expires}); err != nil {
		return errors.Join(err, sb.Close(context.WithoutCancel(ctx)))
	}
	if m.opts.Started != nil {
		m.opts.Started(sb)
	}
	expires := rec.Expires
	if expires.IsZero() {
		expires = m.opts.Now().Add(m.opts.TTL)
	}
	m.add(sb, spec, backend, rec.Created, expires, idle, execTimeout).restoreExecs()
	return nil
}

// endOrphan answers rec's session as ended for reason, with its report written beside
// its record, and removes the record.
func (m *Manager) endOrphan(rec record, reason string) error {
	var errs []error
	now := m.opts.Now()
	rep := sandbox.Report{SandboxID: rec.ID, Start: rec.Created, End: now}
	b, _ := json.MarshalIndent(struct {
		sandbox.Report
		EndReason string `json:"end_reason"`
		Owner     string `json:"previous_owner"`
	}{rep, reason, rec.Owner}, "", "  ")
	if err := os.WriteFile(filepath.Join(m.reg.dir, rec.ID+".report.json"), append(b, '\n'), 0o600); err != nil {
		errs = append(errs, fmt.Errorf("write the report of %s: %w", rec.ID, err))
	}
	// The results of its finished execs stay answerable, as for any ended session.
	execs := map[string]*ExecResult{}
	results := m.reg.loadExecs(rec.ID)
	for i := range results {
		execs[results[i].ExecID] = &results[i]
	}
	m.reg.removeExecs(rec.ID)
	if err := os.Remove(m.reg.path(rec.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	m.mu.Lock()
	m.ended[rec.ID] = &tombstone{info: Info{ID: rec.ID, State: StateEnded, Owner: rec.Owner, Backend: rec.Backend,
		Created: rec.Created, Ended: now, EndReason: reason, Execs: len(results)}, report: rep, execs: execs}
	m.endedList = append(m.endedList, rec.ID)
	m.mu.Unlock()
	m.log.Warn("a sandbox session of an earlier airlock run was destroyed", "sandbox", rec.ID, "previous_owner", rec.Owner, "reason", reason)
	return errors.Join(errs...)
}
