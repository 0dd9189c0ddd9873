package session

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/internal/procstat"
	"github.com/airlock-proxy/airlock/sandbox/native"
)

// registry keeps one record per live session in a directory shared by the airlocks of a
// machine (or a shared volume): which process owns the session. Another replica that is
// asked about it names the owner; an airlock that restarts finds its previous run's
// sessions there (Adopt).
type registry struct {
	dir   string
	owner string
	named bool // owner was configured (sessions.owner), not made of host and pid
	pid   int
	start uint64
}

// record is a session's file in the registry.
type record struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
	// Named: Owner is a configured name (sessions.owner), the same across restarts; only
	// the airlock of that name takes the session over.
	Named   bool      `json:"named,omitempty"`
	PID     int       `json:"pid"`
	Start   uint64    `json:"start"`
	Backend string    `json:"backend"`
	Created time.Time `json:"created"`
	// Spec and Expires let a restarted airlock take the session over (Adopt). The spec
	// holds the env values the create asked for: the file is root's alone (0600 in a 0700
	// directory) and removed when the session ends.
	Spec    *Spec     `json:"spec,omitempty"`
	Expires time.Time `json:"expires,omitzero"`
}

// openRegistry opens the records directory dir; derived says it was not configured but
// follows the environment (a rootless airlock's XDG_RUNTIME_DIR or home).
func openRegistry(dir, owner string, derived bool) (*registry, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sessions.state_dir %s: %w", dir, err)
	}
	if native.Rootless() {
		// Its records hold the sessions' env: no other user may read or swap it. The
		// path to a directory the config names is the operator's (a pod's volume is
		// writable by all, with no other user in the pod); one taken from the
		// environment must be on a path no other user can redirect.
		check := native.CheckOwnDir
		if derived {
			check = native.CheckPrivateDir
		}
		if err := check(dir); err != nil {
			return nil, fmt.Errorf("sessions.state_dir: %w", err)
		}
	}
	pid := os.Getpid()
	named := owner != ""
	if owner == "" {
		h, _ := os.Hostname()
		owner = fmt.Sprintf("%s:%d", h, pid)
	}
	return &registry{dir: dir, owner: owner, named: named, pid: pid, start: procstat.StartTime(pid)}, nil
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

// claim records rec.ID as this process's (rec's owner fields are set here); a live session
// of another process is a NotOwnerError.
func (r *registry) claim(rec record) error {
	id := rec.ID
	if rec, ok := r.read(id); ok && !r.mine(rec) && alive(rec) {
		return &NotOwnerError{ID: id, Owner: rec.Owner}
	} else if ok && r.mine(rec) {
		return fmt.Errorf("%w: sandbox %s already exists", ErrConflict, id)
	}
	rec.Owner, rec.Named, rec.PID, rec.Start = r.owner, r.named, r.pid, r.start
	if rec.Created.IsZero() {
		rec.Created = time.Now().UTC()
	}
	b, _ := json.Marshal(rec)
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
		r.removeExecs(id)
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

// Recorded reports whether dir (sessions.state_dir; "" is the default) holds a record
// of session id: one that an airlock serves, or that is left for the airlock of its name.
func Recorded(dir, id string) bool {
	if dir == "" {
		dir = DefaultStateDirForUser()
	}
	if identity.CheckID(id) != nil {
		return false
	}
	_, err := os.Stat(filepath.Join(dir, id+".json"))
	return err == nil
}
