package native

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Moving a process between cgroups takes the kernel's cgroup_threadgroup_rwsem for writing,
// and the first writer after a quiet spell waits for an RCU grace period: 7-18 ms measured
// on these hosts, against 0.1-0.2 ms for a move within ~10 ms of another one
// (docs/performance.md "Tenth pass"). A sandbox's first run, whose first process the
// holder moves into the sandbox's groups, paid that wait on its critical path. A warming
// takes it earlier, while the sandbox is made: it moves airlock into the group it is
// already in (a move that changes nothing but waits like any other), and again every
// warmEvery, until the first run's processes are in their groups. Nothing else changes:
// the holder and the commands are where they were.
//
// (Putting the holder in the sandbox's groups instead, so that commands are born in them,
// was tried: the red team found the OOM killer taking the holder, commands' CPU throttling
// it, and a run's kill catching its spawner mid-start.)
type warming struct {
	stop chan struct{} // closed to end it
	once sync.Once
	done chan struct{} // closed once it has ended
}

const (
	// warmEvery is how often a warming repeats its move: a move stays quick for ~10 ms
	// after the last one (20 ms was too long).
	warmEvery = 4 * time.Millisecond
	// warmFor bounds a warming whose sandbox runs nothing soon.
	warmFor = time.Second
)

// startWarming starts a warming that moves airlock within its own v1 group under root;
// nil (a warming that does nothing) where there is none to move within.
func startWarming(root string) *warming {
	procs := ownV1Procs(root)
	if procs == "" {
		return nil
	}
	w := &warming{stop: make(chan struct{}), done: make(chan struct{})}
	pid := []byte(strconv.Itoa(os.Getpid()))
	go func() {
		defer close(w.done)
		deadline := time.NewTimer(warmFor)
		defer deadline.Stop()
		tick := time.NewTicker(warmEvery)
		defer tick.Stop()
		for {
			// Best effort: a move it cannot make costs the first run the wait, as before.
			_ = writeExisting(procs, pid)
			select {
			case <-w.stop:
				return
			case <-deadline.C:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// halt ends the warming without waiting for it.
func (w *warming) halt() {
	if w != nil {
		w.once.Do(func() { close(w.stop) })
	}
}

// end ends the warming and waits until it has.
func (w *warming) end() {
	if w != nil {
		w.halt()
		<-w.done
	}
}

// ownV1Procs is the cgroup.procs file of the v1 group airlock is in, in the memory, pids
// or cpu hierarchy under root; "" if none is found.
func ownV1Procs(root string) string {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	h := hierarchy{root: root}
	for _, c := range []string{"memory", "pids", "cpu"} {
		if base := h.v1Dir(c); base != "" {
			if path, ok := v1Path(string(own), c); ok {
				return filepath.Join(base, path, "cgroup.procs")
			}
		}
	}
	return ""
}

// v1Path is the group of v1 controller c in a /proc/PID/cgroup listing.
func v1Path(listing, c string) (string, bool) {
	for _, line := range strings.Split(listing, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && f[1] != "" {
			for _, name := range strings.Split(f[1], ",") {
				if name == c {
					return filepath.Clean("/" + f[2]), true
				}
			}
		}
	}
	return "", false
}

// writeExisting writes b to a file that must exist (a cgroup's), never creating one.
func writeExisting(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
