package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/airlock-proxy/airlock/internal/event"
)

// Events recorded by concurrent writers all land in the chain, each writer's in the order
// it recorded them, and the signed log verifies.
func TestConcurrentWritersKeepChainOrder(t *testing.T) {
	keyFile, pub := testKey(t)
	path := filepath.Join(t.TempDir(), "a.jsonl")
	s := openSink(t, Options{Path: path, SigningKeyFile: keyFile, CheckpointEvents: 50, RotateBytes: 64 << 10})
	const writers, each = 8, 100
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				ev := testEvent(i)
				ev.Path = fmt.Sprintf("/w%d/%d", w, i)
				if err := s.Record(context.Background(), ev); err != nil {
					t.Errorf("writer %d event %d: %v", w, i, err)
				}
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(path + "*")
	r, err := VerifyFiles(VerifyOptions{Paths: files, PublicKey: pub, RequireSealed: true})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if r.Events != writers*each {
		t.Errorf("got %d events, want %d", r.Events, writers*each)
	}
	next := make([]int, writers)
	for _, f := range orderedFiles(t, files) {
		for _, l := range readLines(t, f) {
			var ev Event
			if err := json.Unmarshal(l, &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Kind == event.KindCheckpoint {
				continue
			}
			var w, i int
			fmt.Sscanf(ev.Path, "/w%d/%d", &w, &i)
			if i != next[w] {
				t.Fatalf("writer %d: event %d follows %d in the chain", w, i, next[w]-1)
			}
			next[w]++
		}
	}
}

func orderedFiles(t *testing.T, files []string) []string {
	t.Helper()
	out, err := orderFiles(files)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Events queued while the file is busy are written together: one write(2) for the batch,
// however many events it holds, and every caller learns the outcome of its own event.
func TestBatchIsOneWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	s := openSink(t, Options{Path: path})
	record(t, s, 0, 1)
	s.acquire() // the file is busy
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- s.Record(context.Background(), testEvent(i)) }()
	}
	waitPending(t, s, n)
	before := s.writes
	s.release()
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	s.acquire()
	writes := s.writes - before
	s.release()
	if writes != 1 {
		t.Errorf("%d queued events took %d write(2) calls, want 1", n, writes)
	}
	if got := len(readLines(t, path)); got != n+1 {
		t.Errorf("got %d lines, want %d", got, n+1)
	}
}

// waitPending waits until n events are queued (a condition, not a clock).
func waitPending(t *testing.T, s *Sink, n int) {
	t.Helper()
	for {
		s.mu.Lock()
		got := 0
		if s.pending != nil {
			got = len(s.pending.bodies)
		}
		s.mu.Unlock()
		if got == n {
			return
		}
		runtime.Gosched()
	}
}

// Under "always", Record returns only after its line is fsynced, for concurrent callers
// too (they share fsyncs).
func TestAlwaysIsDurableBeforeReturning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	s := openSink(t, Options{Path: path, Fsync: FsyncAlways})
	var mu sync.Mutex
	syncedAtReturn := map[string]uint64{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 10 {
				ev := testEvent(i)
				ev.ID = fmt.Sprintf("w%d-%d", w, i)
				if err := s.Record(context.Background(), ev); err != nil {
					t.Error(err)
					return
				}
				s.mu.Lock()
				synced := s.synced
				s.mu.Unlock()
				mu.Lock()
				syncedAtReturn[ev.ID] = synced
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, l := range readLines(t, path) {
		var h struct {
			Seq uint64 `json:"seq"`
			ID  string `json:"id"`
		}
		if err := json.Unmarshal(l, &h); err != nil {
			t.Fatal(err)
		}
		if got := syncedAtReturn[h.ID]; got < h.Seq {
			t.Errorf("Record of %s (seq %d) returned when only seq %d was fsynced", h.ID, h.Seq, got)
		}
	}
	if len(syncedAtReturn) != 40 {
		t.Errorf("got %d acknowledged events, want 40", len(syncedAtReturn))
	}
}

// Under "group", Record returns once its line is written (a crash of airlock loses
// nothing), and from then on every written line is either fsynced or has an fsync
// scheduled within the window; a crash of the machine loses at most the unsynced ones.
func TestGroupWritesBeforeReturningAndSchedulesFsync(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	s := openSink(t, Options{Path: path, GroupWindow: 1e9})
	if w := s.syncWindow(); w != 1e9 {
		t.Fatalf("sync window %s, want the configured 1s", w)
	}
	for i := range 20 {
		if err := s.Record(context.Background(), testEvent(i)); err != nil {
			t.Fatal(err)
		}
		if got := len(readLines(t, path)); got != i+1 {
			t.Fatalf("after Record %d returned the file has %d lines, want %d", i, got, i+1)
		}
		s.mu.Lock()
		written, synced, armed := s.written, s.synced, s.armed
		s.mu.Unlock()
		if written != uint64(i+1) || synced < written && !armed {
			t.Fatalf("after Record %d: written %d synced %d armed %v: an unsynced line without a scheduled fsync", i, written, synced, armed)
		}
	}
	s.syncNow() // the window ends
	s.mu.Lock()
	if s.synced != s.written {
		t.Errorf("after the window's fsync: synced %d, written %d", s.synced, s.written)
	}
	s.mu.Unlock()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s.synced != 20 {
		t.Errorf("after Close: synced %d, want 20", s.synced)
	}
}

// Close writes what is queued: every Record that returned nil is in the file, every other
// one returned ErrClosed.
func TestCloseFlushesQueuedEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.jsonl")
	s := openSink(t, Options{Path: path})
	s.acquire()
	errs := make(chan error, 8)
	for i := range 8 {
		go func() { errs <- s.Record(context.Background(), testEvent(i)) }()
	}
	waitPending(t, s, 8)
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	for { // Close has begun when Record refuses
		s.mu.Lock()
		c := s.closed
		s.mu.Unlock()
		if c {
			break
		}
		runtime.Gosched()
	}
	s.release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	ok := 0
	for range 8 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case !errors.Is(err, ErrClosed):
			t.Errorf("Record: %v", err)
		}
	}
	if got := len(readLines(t, path)); got != ok || ok != 8 {
		t.Errorf("%d events acknowledged, %d lines in the file; want 8 and 8", ok, got)
	}
	if err := s.Record(context.Background(), testEvent(9)); !errors.Is(err, ErrClosed) {
		t.Errorf("Record after Close: %v, want ErrClosed", err)
	}
}

// A writer killed without Close loses no event it had acknowledged: each acknowledged line
// is in the file; the log ends unsigned (no final checkpoint), and verify with the key
// names exactly the unsigned tail. Restarting continues the chain.
func TestKillWithoutCloseLosesNothingAcknowledged(t *testing.T) {
	if path := os.Getenv("AUDIT_TEST_CHILD_LOG"); path != "" {
		crashChild(path, os.Getenv("AUDIT_TEST_CHILD_KEY"))
		return
	}
	keyFile, pub := testKey(t)
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillWithoutCloseLosesNothingAcknowledged$")
	cmd.Env = append(os.Environ(), "AUDIT_TEST_CHILD_LOG="+path, "AUDIT_TEST_CHILD_KEY="+keyFile)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if line == "done" {
			break
		}
		if id, ok := strings.CutPrefix(line, "acked "); ok {
			acked[id] = true
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if len(acked) != 25 {
		t.Fatalf("child acknowledged %d events, want 25", len(acked))
	}
	inFile := map[string]bool{}
	for _, l := range readLines(t, path) {
		var ev Event
		if err := json.Unmarshal(l, &ev); err != nil {
			t.Fatal(err)
		}
		inFile[ev.ID] = true
	}
	for id := range acked {
		if !inFile[id] {
			t.Errorf("acknowledged event %s is not in the file", id)
		}
	}
	// 25 events with a checkpoint after every 10: lines 1-10, cp 11, 12-21, cp 22, 23-27.
	r, err := Verify([]string{path}, pub)
	if !errors.Is(err, ErrBroken) || r.Sealed || r.LastSignedSeq != 22 || r.UnsignedTail != 5 || r.Breaks[0].Line != 23 {
		t.Errorf("got %v sealed %v last signed %d tail %d, want the unsigned tail from line 23 (5 events after seq 22)", err, r.Sealed, r.LastSignedSeq, r.UnsignedTail)
	}
	s := openSink(t, Options{Path: path, SigningKeyFile: keyFile, CheckpointEvents: 10})
	record(t, s, 25, 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if r, err := Verify([]string{path}, pub); err != nil || !r.Sealed || r.Events != 26 {
		t.Errorf("after a restart and Close: %v (sealed %v, %d events)", err, r.Sealed, r.Events)
	}
}

func crashChild(path, keyFile string) {
	s, err := Open(Options{Path: path, SigningKeyFile: keyFile, CheckpointEvents: 10, GroupWindow: 1e9})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	for i := range 25 {
		ev := testEvent(i)
		ev.ID = "ev-" + strconv.Itoa(i)
		if err := s.Record(context.Background(), ev); err != nil {
			fmt.Println("record:", err)
			os.Exit(2)
		}
		fmt.Println("acked", ev.ID)
	}
	fmt.Println("done")
	select {} // killed here, without Close
}
