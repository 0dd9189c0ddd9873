//go:build e2e

package docker_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

// inNetns runs open inside the network namespace of pid, on a locked thread switched back
// before unlock (as sandbox.ListenInNetns does). Sockets it opens stay in that namespace.
func inNetns(pid int, open func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		openErr := open()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- err
			return // the thread stays locked and dies with this goroutine
		}
		runtime.UnlockOSThread()
		done <- openErr
	}()
	return <-done
}

// listenAllInNetns opens 0.0.0.0:3128 inside the network namespace of pid.
func listenAllInNetns(pid int) (net.Listener, error) {
	var ln net.Listener
	err := inNetns(pid, func() (err error) {
		ln, err = net.Listen("tcp4", "0.0.0.0:3128")
		return err
	})
	return ln, err
}

// dnsResponder answers every DNS question over UDP with an A record (answerIP) and
// remembers the names asked: a resolver that would make a forwarded query visible.
type dnsResponder struct {
	pc    net.PacketConn
	mu    sync.Mutex
	names []string
}

const answerIP = "203.0.113.53"

// startDNSResponderInNetns serves DNS on 0.0.0.0:53 inside the network namespace of pid.
func startDNSResponderInNetns(pid int) (*dnsResponder, error) {
	r := &dnsResponder{}
	err := inNetns(pid, func() (err error) {
		r.pc, err = net.ListenPacket("udp4", "0.0.0.0:53")
		return err
	})
	if err != nil {
		return nil, err
	}
	go r.serve()
	return r, nil
}

func (r *dnsResponder) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := r.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil {
			continue
		}
		q, err := p.Question()
		if err != nil {
			continue
		}
		r.mu.Lock()
		r.names = append(r.names, q.Name.String())
		r.mu.Unlock()
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true})
		b.StartQuestions()
		b.Question(q)
		b.StartAnswers()
		if q.Type == dnsmessage.TypeA {
			b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60},
				dnsmessage.AResource{A: [4]byte(net.ParseIP(answerIP).To4())})
		}
		if msg, err := b.Finish(); err == nil {
			r.pc.WriteTo(msg, from)
		}
	}
}

// asked lists the names queried so far.
func (r *dnsResponder) asked() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.names...)
}

func (r *dnsResponder) Close() error { return r.pc.Close() }

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }
