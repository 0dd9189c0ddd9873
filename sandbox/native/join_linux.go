package native

import (
	"context"
	"errors"
	"fmt"
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
// (docs/performance.md). Each run's first process written to the sandbox's groups paid
// that wait on the run's critical path. The C holder now joins the sandbox's v1 pids and
// cpu groups while the sandbox is made, so that each command is born in them (and in its
// run's v2 group: fork_into in stage_linux.c); the wait is taken off the critical path by
// a move that changes nothing, made as soon as the groups exist (ownGroupProcs); and the
// one move left per run, into the memory group, follows the join closely enough to be
// quick for a one-shot run.
//
// The holder stays out of the memory group: memory that outlives its processes (a file on
// the sandbox's tmpfs, a System V segment) can fill the group with no command left in it,
// and the OOM killer would then take the holder, and the sandbox with it (the red team's
// finding). The Go holder of a binary built without cgo has threads, which would count
// against the pids limit: it joins nothing, and moves each command instead (procsFiles).
func holderJoins(controller string) bool { return cHolder && controller != "memory" }

// holderJoinsV1 reports whether the holder joins any of the sandbox's v1 groups.
func (cg *cgroups) holderJoinsV1() bool {
	for c := range cg.v1 {
		if holderJoins(c) {
			return true
		}
	}
	return false
}

// holderJoin puts the holder in the sandbox's v1 groups in the background.
type holderJoin struct {
	pid  chan int      // the holder's pid; closed without one when no holder starts
	once sync.Once     // pid is given or closed once
	done chan struct{} // closed once the holder has joined, or could not
	err  error         // why it could not; read after done
}

// warmEvery is how often the join repeats its move that changes nothing while it waits
// for the holder: a move stays quick for ~10 ms after the last one (20 ms was too long).
const warmEvery = 4 * time.Millisecond

// startJoin starts the move of a holder yet to start into cg's v1 groups.
func (cg *cgroups) startJoin() *holderJoin {
	j := &holderJoin{pid: make(chan int, 1), done: make(chan struct{})}
	go func() {
		defer close(j.done)
		warm := cg.ownGroupProcs()
		for {
			if warm != "" {
				// Best effort: a move it cannot make costs the join the wait.
				_ = writeExisting(warm, []byte(strconv.Itoa(os.Getpid())))
			}
			t := time.NewTimer(warmEvery)
			select {
			case pid, ok := <-j.pid:
				t.Stop()
				if !ok {
					j.err = errors.New("join cgroup: no holder")
					return
				}
				j.err = cg.joinV1(pid)
				return
			case <-t.C:
			}
		}
	}()
	return j
}

// started gives the holder's pid.
func (j *holderJoin) started(pid int) {
	j.once.Do(func() { j.pid <- pid })
}

// wait returns once the holder has joined (nil) or could not; nil for no join at all.
func (j *holderJoin) wait(ctx context.Context) error {
	if j == nil {
		return nil
	}
	select {
	case <-j.done:
		return j.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// await returns once the join is over, whatever its outcome; at once for no join.
func (j *holderJoin) await() {
	if j != nil {
		<-j.done
	}
}

// end waits for the join to finish, first telling it no holder will come if none did.
func (j *holderJoin) end() {
	if j == nil {
		return
	}
	j.once.Do(func() { close(j.pid) })
	<-j.done // cgroup writes, bounded
}

// joinV1 moves pid into each of the sandbox's v1 groups the holder joins.
func (cg *cgroups) joinV1(pid int) error {
	b := []byte(strconv.Itoa(pid))
	for c, dir := range cg.v1 {
		if !holderJoins(c) {
			continue
		}
		if err := writeExisting(filepath.Join(dir, "cgroup.procs"), b); err != nil {
			return fmt.Errorf("join cgroup %s: %w", dir, err)
		}
	}
	return nil
}

// ownGroupProcs is the cgroup.procs file of the v1 group airlock is in, in a hierarchy
// of one of cg's controllers; "" if none is found. Writing airlock's pid to it is a move
// that changes nothing but waits for the grace period, after which the kernel lets the
// next moves through quickly for a while.
func (cg *cgroups) ownGroupProcs() string {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for c, dir := range cg.v1 {
		mount := strings.TrimSuffix(dir, string(filepath.Separator)+filepath.Join(cgroupPrefix, filepath.Base(dir)))
		if path, ok := v1Path(string(own), c); ok && mount != dir {
			return filepath.Join(mount, path, "cgroup.procs")
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
