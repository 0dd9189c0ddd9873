package secrets

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/airlock-proxy/airlock/internal/procstat"
)

// Lease names one Vault lease or token the broker issued for a sandbox by what revokes it
// without being a credential: the lease id, or the token's accessor (an accessor
// authenticates nothing; Vault revokes a token by it through auth/token/revoke-accessor).
type Lease struct {
	Sandbox    string `json:"sandbox"`
	Credential string `json:"credential"`
	LeaseID    string `json:"lease_id,omitempty"`
	Accessor   string `json:"token_accessor,omitempty"`
}

func (l Lease) valid() bool { return (l.LeaseID == "") != (l.Accessor == "") }

// Journal keeps what the broker must revoke where it outlives the process, so that the
// airlock that comes after a crashed one can revoke it. The broker adds a lease before the
// credential is first used (an Add that fails refuses the credential, and revokes it) and
// removes it once it was revoked or ended in Vault.
type Journal interface {
	Add(Lease) error
	Remove(Lease) error
	// Left lists the leases added by processes that no longer run.
	Left() ([]Lease, error)
}

// FileJournal is a Journal in a directory (0700): one file per lease, holding the Lease
// and the process that added it (pid, start time, PID namespace and boot: a pid alone can
// be reused, after a reboot a service started as early can have the same pid and start
// time, and a pid names a process only in its own PID namespace). Several processes may
// share the directory; each sees the others' leases as left only once their process is
// gone. A pid of another PID namespace (of this boot) says nothing here; each process also
// holds an owner file in the directory locked while it runs, and a lease of another
// namespace is left once that lock is free (a restarted container's airlock, in a new
// namespace, revokes what its predecessor left). One naming no owner file is left alone:
// Vault's TTL ends it.
type FileJournal struct {
	// Logger says, once, that leases of other PID namespaces were left alone; nil: silent.
	Logger *slog.Logger

	dir     string
	pid     int
	start   uint64
	boot    string // the kernel's boot id; "" when unknown
	pidns   uint64 // inode of this process's PID namespace; 0 when unknown
	owner   string // name of this process's owner file, locked while it runs; "" when none
	lock    *os.File
	foreign sync.Once
}

// journalRecord is one lease's file.
type journalRecord struct {
	Lease
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
	Boot  string `json:"boot,omitempty"`
	PIDNS uint64 `json:"pidns,omitempty"` // inode of /proc/self/ns/pid of the process
	// Owner is the process's owner file in the directory, which it holds locked (flock)
	// while it runs: whether it still does can be seen from any PID namespace.
	Owner string `json:"owner,omitempty"`
}

// bootID names this boot of the machine ("" when /proc does not say).
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// pidNamespace is the inode of this process's PID namespace (0 when /proc does not say).
func pidNamespace() uint64 {
	fi, err := os.Stat("/proc/self/ns/pid")
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// OpenJournal opens (creating) the journal in dir.
func OpenJournal(dir string) (*FileJournal, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lease journal: %w", err)
	}
	pid := os.Getpid()
	j := &FileJournal{dir: dir, pid: pid, start: procstat.StartTime(pid), boot: bootID(), pidns: pidNamespace()}
	// The owner file: locked for as long as this process runs (the kernel drops the lock
	// when it ends, however it ends), so that an airlock of another PID namespace, to which
	// this pid means nothing, can tell whether these leases are left. The name is random:
	// a restarted container's airlock can have the same pid and namespace inode.
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	// Made under another name and renamed once locked: an owner file is never seen unlocked
	// while its process runs (Left removes those).
	name := ownerPrefix + hex.EncodeToString(rnd[:])
	f, err := os.OpenFile(filepath.Join(dir, ".new"+name), os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lease journal: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		_ = os.Remove(f.Name())
		if errors.Is(err, syscall.ENOLCK) || errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.EINVAL) {
			return j, nil // a file system without locks: records name no owner file
		}
		return nil, fmt.Errorf("lease journal: lock %s: %w", f.Name(), err)
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, name)); err != nil {
		f.Close()
		_ = os.Remove(f.Name())
		return nil, fmt.Errorf("lease journal: %w", err)
	}
	j.owner, j.lock = name, f
	return j, nil
}

// ownerPrefix begins the names of the owner files (see journalRecord.Owner).
const ownerPrefix = ".owner-"

// ownerGone reports whether the owner file name is no process's any more: it exists and
// nothing holds its lock. (A missing one is not taken as gone: a record of an airlock that
// wrote none says nothing about its process.)
func (j *FileJournal) ownerGone(name string) bool {
	if !strings.HasPrefix(name, ownerPrefix) || strings.ContainsAny(name, "/\x00") {
		return false
	}
	f, err := os.OpenFile(filepath.Join(j.dir, name), os.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return true
}

func (j *FileJournal) path(l Lease) string {
	id := "lease\x00" + l.LeaseID
	if l.Accessor != "" {
		id = "accessor\x00" + l.Accessor
	}
	h := sha256.Sum256([]byte(id))
	return filepath.Join(j.dir, hex.EncodeToString(h[:16])+".json")
}

// Add records l durably (written and synced before it returns).
func (j *FileJournal) Add(l Lease) error {
	if !l.valid() {
		return errors.New("lease journal: a lease needs exactly one of a lease id and a token accessor")
	}
	b, _ := json.Marshal(journalRecord{Lease: l, PID: j.pid, Start: j.start, Boot: j.boot, PIDNS: j.pidns, Owner: j.owner})
	p := j.path(l)
	tmp, err := os.CreateTemp(j.dir, ".add-*")
	if err != nil {
		return fmt.Errorf("lease journal: %w", err)
	}
	_, err = tmp.Write(append(b, '\n'))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("lease journal: %w", err)
	}
	if d, err := os.Open(j.dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// Remove forgets l; a lease not recorded is no error.
func (j *FileJournal) Remove(l Lease) error {
	if !l.valid() {
		return nil
	}
	if err := os.Remove(j.path(l)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("lease journal: %w", err)
	}
	return nil
}

// Left lists the leases of processes that are gone: of an earlier boot, of this PID
// namespace and no longer running, or of another whose owner file nothing holds locked. Files it cannot read are reported in the error and
// left in place.
func (j *FileJournal) Left() ([]Lease, error) {
	ents, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, fmt.Errorf("lease journal: %w", err)
	}
	var out []Lease
	var errs []error
	foreign := 0
	referenced := map[string]bool{}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(j.dir, e.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // removed meanwhile
		}
		var rec journalRecord
		if err == nil {
			err = json.Unmarshal(b, &rec)
		}
		if err == nil && !rec.valid() {
			err = errors.New("neither a lease id nor a token accessor")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("lease journal %s: %w", e.Name(), err))
			continue
		}
		if rec.Boot != "" && j.boot != "" && rec.Boot != j.boot {
			out = append(out, rec.Lease) // added before the machine last started
			continue
		}
		if rec.PIDNS != 0 && j.pidns != 0 && rec.PIDNS != j.pidns {
			referenced[rec.Owner] = true
			if j.ownerGone(rec.Owner) {
				out = append(out, rec.Lease) // its process no longer holds its owner file
				continue
			}
			foreign++ // another PID namespace's: its pid means nothing here
			continue
		}
		referenced[rec.Owner] = true
		if rec.PID == j.pid && rec.Start == j.start {
			continue // this process's own
		}
		if rec.PID > 0 && rec.Start != 0 && procstat.StartTime(rec.PID) == rec.Start {
			continue // another running process's
		}
		out = append(out, rec.Lease)
	}
	// Owner files of processes that are gone and named by no record are of no more use.
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, ownerPrefix) && n != j.owner && !referenced[n] && len(errs) == 0 && j.ownerGone(n) {
			_ = os.Remove(filepath.Join(j.dir, n))
		}
	}
	if foreign > 0 && j.Logger != nil {
		j.foreign.Do(func() {
			j.Logger.Info("lease journal: leases recorded by airlock processes of another PID namespace are left alone (whether they still run cannot be seen from here; that namespace's airlock revokes them, or Vault's TTL ends them)",
				"dir", j.dir, "leases", foreign)
		})
	}
	return out, errors.Join(errs...)
}
