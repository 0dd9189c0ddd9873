package session

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
)

// The results of a session's finished execs (status, signal, duration, timed-out flag,
// output byte counts, decision: never output) are kept beside its record, one JSON line
// each in ID.execs.jsonl, so that an airlock that takes the session over after a crash
// still answers GET .../execs/{exec_id} for them.

func (r *registry) execsPath(id string) string { return filepath.Join(r.dir, id+".execs.jsonl") }

// saveExec appends res to id's results; it reports whether it did.
func (r *registry) saveExec(id string, res ExecResult) bool {
	b, err := json.Marshal(res)
	if err != nil {
		return false
	}
	f, err := os.OpenFile(r.execsPath(id), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return false
	}
	_, err = f.Write(append(b, '\n'))
	return f.Close() == nil && err == nil
}

// rewriteExecs replaces id's results with rs (oldest first), dropping those past the
// bound of what a session remembers.
func (r *registry) rewriteExecs(id string, rs []ExecResult) {
	var buf bytes.Buffer
	for _, res := range rs {
		b, _ := json.Marshal(res)
		buf.Write(append(b, '\n'))
	}
	tmp := r.execsPath(id) + ".tmp"
	if os.WriteFile(tmp, buf.Bytes(), 0o600) != nil || os.Rename(tmp, r.execsPath(id)) != nil {
		os.Remove(tmp)
	}
}

// loadExecs reads id's results, oldest first (the last maxExecRecords; a torn last line,
// written when the process died, is skipped).
func (r *registry) loadExecs(id string) []ExecResult {
	f, err := os.Open(r.execsPath(id))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []ExecResult
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var res ExecResult
		if json.Unmarshal(sc.Bytes(), &res) != nil || res.ExecID == "" || res.State != "done" {
			continue
		}
		out = append(out, res)
	}
	if len(out) > maxExecRecords {
		out = out[len(out)-maxExecRecords:]
	}
	return out
}

func (r *registry) removeExecs(id string) { os.Remove(r.execsPath(id)) }

// persist keeps the finished exec res beside the session's record; every so often the file
// is rewritten with only what the session still remembers. Call without s.mu.
func (s *Session) persist(res ExecResult) {
	reg := s.m.reg
	s.persistMu.Lock()
	defer s.persistMu.Unlock()
	if !reg.saveExec(s.id, res) {
		s.m.log.Warn("the result of an exec is not kept for a restart", "sandbox", s.id, "exec", res.ExecID)
		return
	}
	s.mu.Lock()
	if s.state == StateEnded {
		// The session ended (and its files were removed) while the command finished.
		s.mu.Unlock()
		reg.removeExecs(s.id)
		return
	}
	s.saved++
	var keep []ExecResult
	if s.saved > 2*maxExecRecords {
		for _, id := range s.execOrder {
			if r := s.execs[id]; r != nil && r.State == "done" {
				keep = append(keep, *r)
			}
		}
		s.saved = len(keep)
	}
	s.mu.Unlock()
	if keep != nil {
		reg.rewriteExecs(s.id, keep)
	}
}

// restoreExecs makes the results kept by an earlier run answerable again.
func (s *Session) restoreExecs() {
	rs := s.m.reg.loadExecs(s.id)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range rs {
		s.remember(&rs[i])
	}
	s.nexec += len(rs)
	s.saved = len(rs)
}
