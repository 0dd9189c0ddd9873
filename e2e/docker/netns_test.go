//go:build e2e

package docker_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// listenAllInNetns opens 0.0.0.0:3128 inside the network namespace of pid, the way
// sandbox.ListenInNetns opens loopback: on a locked thread switched back before unlock.
func listenAllInNetns(pid int) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		defer orig.Close()
		target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: err}
			return
		}
		ln, lerr := net.Listen("tcp4", "0.0.0.0:3128")
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			if ln != nil {
				ln.Close()
			}
			done <- result{err: err}
			return // the thread stays locked and dies with this goroutine
		}
		runtime.UnlockOSThread()
		done <- result{ln: ln, err: lerr}
	}()
	r := <-done
	return r.ln, r.err
}

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }
