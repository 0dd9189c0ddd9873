package native

import (
	"os/exec"
	"runtime"
	"sync"
)

// A parent-death signal (Pdeathsig) is tied to the thread that forked the child, not to
// the process: a holder started from a thread that later exits, as the thread of a
// goroutine that ends while locked to it does, would be killed with that thread, and its
// sandbox with it. startPinned starts commands from one OS thread that is locked for the
// life of the process and never exits, so a sandbox lives exactly as long as airlock.
var spawner struct {
	once sync.Once
	reqs chan func()
}

func startPinned(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for f := range spawner.reqs {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	spawner.reqs <- func() { errc <- cmd.Start() }
	return <-errc
}
