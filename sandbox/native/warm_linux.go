package native

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
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
	pid := []byte(strconv.Itoa(os.Getpid()))
	procs := ownV1Procs(root, string(pid))
	if procs == nil {
		return nil
	}
	w := &warming{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer procs.Close()
		deadline := time.NewTimer(warmFor)
		defer deadline.Stop()
		tick := time.NewTicker(warmEvery)
		defer tick.Stop()
		for {
			// Best effort: a move it cannot make costs the first run the wait, as before.
			_, _ = unix.Pwrite(int(procs.Fd()), pid, 0)
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

// ownV1Procs opens the cgroup.procs file of the v1 group airlock (pid) is in, in the
// memory, pids or cpu hierarchy under root; nil if none is found. The group is the one
// that lists pid: a path from /proc/self/cgroup names another where the mount is of a
// subtree (a container's view) or airlock is in a cgroup namespace, and held open, the
// file stays its group's if the group is renamed (the red team's findings).
func ownV1Procs(root, pid string) *os.File {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	h := hierarchy{root: root}
	for _, c := range []string{"memory", "pids", "cpu"} {
		base := h.v1Dir(c)
		path, ok := v1Path(string(own), c)
		if base == "" || !ok {
			continue
		}
		f, err := os.OpenFile(filepath.Join(base, path, "cgroup.procs"), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if b, err := io.ReadAll(f); err == nil && slices.Contains(strings.Fields(string(b)), pid) {
			return f
		}
		f.Close()
	}
	return nil
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
