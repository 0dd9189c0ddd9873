package secrets_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-proxy/airlock/internal/procstat"
	"github.com/airlock-proxy/airlock/secrets"
)

// TestJournal: a lease is left (for a successor to revoke) only once the process that added
// it is gone; this process's own and a running process's are not; removing forgets it; a
// file that cannot be read is reported and kept.
func TestJournal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "leases")
	j, err := secrets.OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("journal directory: %v %v, want mode 0700", fi, err)
	}
	mine := secrets.Lease{Sandbox: "sbx-1", Credential: "db", LeaseID: "leased/db/abc"}
	tok := secrets.Lease{Sandbox: "sbx-1", Credential: "child", Accessor: "acc-1"}
	for _, l := range []secrets.Lease{mine, tok} {
		if err := j.Add(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Add(secrets.Lease{Sandbox: "sbx-1", Credential: "x"}); err == nil {
		t.Errorf("Add of a lease with nothing to revoke it by succeeded")
	}
	// as writes l as added by process (pid, start): j adds it, then its file is rewritten.
	as := func(l secrets.Lease, pid int, start uint64) {
		if err := j.Add(l); err != nil {
			t.Fatal(err)
		}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			b, _ := os.ReadFile(p)
			var rec map[string]any
			if json.Unmarshal(b, &rec) != nil || rec["sandbox"] != l.Sandbox {
				continue
			}
			rec["pid"], rec["start"] = pid, start
			b, _ = json.Marshal(rec)
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	dead := secrets.Lease{Sandbox: "sbx-2", Credential: "db", LeaseID: "leased/db/dead"}
	as(dead, 999999999, 5)
	as(secrets.Lease{Sandbox: "sbx-3", Credential: "child", Accessor: "acc-3"}, 1, procstat.StartTime(1)+1)
	as(secrets.Lease{Sandbox: "sbx-4", Credential: "db", LeaseID: "leased/db/live"}, 1, procstat.StartTime(1))
	os.WriteFile(filepath.Join(dir, "broken.json"), []byte("{not json"), 0o600)

	left, err := j.Left()
	if err == nil || !strings.Contains(err.Error(), "broken.json") {
		t.Errorf("Left: error %v, want the broken file named", err)
	}
	var got []string
	for _, l := range left {
		got = append(got, l.Sandbox)
	}
	slices.Sort(got)
	if strings.Join(got, ",") != "sbx-2,sbx-3" {
		t.Errorf("left: %v, want the dead process's (sbx-2) and the one whose pid was reused (sbx-3)", left)
	}
	if err := j.Remove(dead); err != nil {
		t.Fatal(err)
	}
	if left, _ := j.Left(); len(left) != 1 || left[0].Sandbox != "sbx-3" {
		t.Errorf("left after removing sbx-2's: %+v", left)
	}
	if err := j.Remove(dead); err != nil {
		t.Errorf("Remove twice: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "broken.json")); err != nil {
		t.Errorf("the broken file: %v, want it kept", err)
	}
	// Another process (a successor) sees this one's leases as left only after it is gone:
	// here, this process is alive.
	j2, _ := secrets.OpenJournal(dir)
	left, _ = j2.Left()
	for _, l := range left {
		if l.Sandbox == "sbx-1" {
			t.Errorf("a running process's lease listed as left: %+v", l)
		}
	}
	for _, l := range []secrets.Lease{mine, tok} {
		if err := j.Remove(l); err != nil {
			t.Fatal(err)
		}
	}
	ents := records(dir)
	if len(ents) != 3 {
		t.Errorf("journal holds %d files, want the 3 of other processes (sbx-3, sbx-4, broken)", len(ents))
	}
}

// TestJournalLeaseOfEarlierBootWithSamePIDAndStart: after a reboot, an airlock started as
// early as the crashed one (a service at boot) can have its pid and its start time (ticks
// since boot). The crashed process's lease must still be left for revocation, not taken
// for this process's own and kept unrevoked for ever.
func TestJournalLeaseOfEarlierBootWithSamePIDAndStart(t *testing.T) {
	if _, err := os.Stat("/proc/sys/kernel/random/boot_id"); err != nil {
		t.Skip("no boot id here")
	}
	dir := filepath.Join(t.TempDir(), "leases")
	j, err := secrets.OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	l := secrets.Lease{Sandbox: "sbx-before-reboot", Credential: "db", LeaseID: "leased/db/old"}
	if err := j.Add(l); err != nil {
		t.Fatal(err)
	}
	ents := records(dir)
	if len(ents) != 1 {
		t.Fatalf("journal holds %d files, want 1", len(ents))
	}
	p := filepath.Join(dir, ents[0].Name())
	b, _ := os.ReadFile(p)
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	if rec["pid"] != float64(os.Getpid()) || rec["start"] != float64(procstat.StartTime(os.Getpid())) {
		t.Fatalf("record %s: want this process's pid and start time", b)
	}
	// The same pid and start time, written during another boot of the machine.
	rec["boot"] = "00000000-0000-4000-8000-000000000000"
	b, _ = json.Marshal(rec)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	j2, _ := secrets.OpenJournal(dir) // the airlock of the new boot, same pid and start
	left, err := j2.Left()
	if err != nil || len(left) != 1 || left[0] != l {
		t.Errorf("left: %+v, %v; want the lease of the earlier boot", left, err)
	}
}

// TestJournalLeavesOtherPIDNamespacesAlone: two airlocks in different PID namespaces that
// share $AIRLOCK_HOME see each other's pids as nothing or as some other process. A record
// of another PID namespace is never left (its airlock may run), however dead its pid looks
// here, and that is said once; one of this namespace whose process is gone is left, and one
// of another namespace but an earlier boot is left too.
func TestJournalLeavesOtherPIDNamespacesAlone(t *testing.T) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/pid", &st); err != nil {
		t.Skip("no PID namespace inode here")
	}
	dir := filepath.Join(t.TempDir(), "leases")
	j, err := secrets.OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	j.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := gone.Process.Pid
	other := secrets.Lease{Sandbox: "sbx-other-ns", Credential: "db", LeaseID: "leased/db/other"}
	mine := secrets.Lease{Sandbox: "sbx-this-ns", Credential: "db", LeaseID: "leased/db/mine"}
	oldBoot := secrets.Lease{Sandbox: "sbx-other-ns-old-boot", Credential: "db", LeaseID: "leased/db/old"}
	for _, r := range []struct {
		l     secrets.Lease
		pidns uint64
		boot  string
	}{
		{other, st.Ino + 1, ""},
		{mine, st.Ino, ""},
		{oldBoot, st.Ino + 1, "00000000-0000-4000-8000-000000000000"},
	} {
		if err := j.Add(r.l); err != nil {
			t.Fatal(err)
		}
		rewriteRecord(t, dir, r.l, func(rec map[string]any) {
			rec["pid"], rec["start"], rec["pidns"] = deadPID, 12345, r.pidns
			if r.boot != "" {
				rec["boot"] = r.boot
			}
		})
	}
	for i := 0; i < 2; i++ {
		left, err := j.Left()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, l := range left {
			got[l.Sandbox] = true
		}
		if got[other.Sandbox] || !got[mine.Sandbox] || !got[oldBoot.Sandbox] || len(left) != 2 {
			t.Errorf("left: %+v; want %s and %s, not %s (another PID namespace's)", left, mine.Sandbox, oldBoot.Sandbox, other.Sandbox)
		}
	}
	if n := strings.Count(logs.String(), "another PID namespace"); n != 1 {
		t.Errorf("the log says %d times that another namespace's leases were left alone, want once:\n%s", n, logs.String())
	}
	b, _ := os.ReadFile(filepath.Join(dir, recordName(t, dir, mine)))
	if !strings.Contains(string(b), fmt.Sprintf(`"pidns":%d`, st.Ino)) {
		t.Errorf("record %s lacks this PID namespace's inode %d", b, st.Ino)
	}
}

// recordName is the journal file holding l.
func recordName(t *testing.T, dir string, l secrets.Lease) string {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if strings.Contains(string(b), `"lease_id":"`+l.LeaseID+`"`) {
			return e.Name()
		}
	}
	t.Fatalf("no record of %s", l.LeaseID)
	return ""
}

func rewriteRecord(t *testing.T, dir string, l secrets.Lease, f func(map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, recordName(t, dir, l))
	b, _ := os.ReadFile(p)
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	f(rec)
	b, _ = json.Marshal(rec)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// journalChildEnv makes this test binary a process that adds a lease to the journal in the
// directory it names and, unless the value ends in ":stay", exits (journalChild).
const journalChildEnv = "AIRLOCK_TEST_JOURNAL_CHILD"

func init() {
	v := os.Getenv(journalChildEnv)
	if v == "" {
		return
	}
	dir, stay := strings.CutSuffix(v, ":stay")
	j, err := secrets.OpenJournal(dir)
	if err == nil {
		err = j.Add(secrets.Lease{Sandbox: "sbx-child", Credential: "db", LeaseID: "leased/db/child"})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("added")
	if stay {
		_, _ = os.Stdin.Read(make([]byte, 1)) // until the test closes stdin
	}
	os.Exit(0)
}

// TestJournalLeftByAnotherPIDNamespace: an airlock in a container that is restarted comes
// back in a new PID namespace; the leases its previous run (in a namespace now gone) added
// are left for it to revoke, while those of an airlock still running in another namespace
// are not.
func TestJournalLeftByAnotherPIDNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a PID namespace")
	}
	dir := filepath.Join(t.TempDir(), "leases")
	run := func(stay bool) (*exec.Cmd, func()) {
		v := dir
		if stay {
			v += ":stay"
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), journalChildEnv+"="+v)
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 6)
		if _, err := out.Read(b); err != nil || string(b) != "added\n" {
			t.Fatalf("the child in a new PID namespace: %q %v", b, err)
		}
		return cmd, func() { in.Close(); _ = cmd.Wait() }
	}
	j, err := secrets.OpenJournal(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, done := run(true)
	left, err := j.Left()
	if err != nil || len(left) != 0 {
		t.Errorf("left while the other namespace's airlock runs: %+v %v, want none", left, err)
	}
	done()
	left, err = j.Left()
	if err != nil || len(left) != 1 || left[0].LeaseID != "leased/db/child" {
		t.Errorf("left once the other namespace's airlock is gone: %+v %v, want its lease", left, err)
	}
	// Revoked and removed, the gone airlock's owner file goes too; this one's stays.
	for _, l := range left {
		if err := j.Remove(l); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := j.Left(); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), ".owner-") {
		t.Errorf("journal directory holds %v, want only this process's owner file", ents)
	}
}

// records are the lease records in the journal directory (its owner files aside).
func records(dir string) []os.DirEntry {
	ents, _ := os.ReadDir(dir)
	return slices.DeleteFunc(ents, func(e os.DirEntry) bool { return strings.HasPrefix(e.Name(), ".") })
}
