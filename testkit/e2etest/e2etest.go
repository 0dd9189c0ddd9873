// Package e2etest holds what the end-to-end suites share: a host offering things a sandbox
// must not reach, a static resolver, an in-memory audit recorder. Test support only.
package e2etest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/audit"
)

// Host is what the host offers that a sandbox must not reach.
type Host struct {
	TCPPort  string // listening on all addresses, IPv4 and IPv6
	UDPPort  string
	UDPSeen  atomic.Int64
	ExtIP    string // a non-loopback address of the host ("" if none)
	UnixPath string // a world-writable unix socket in the host's /tmp
	Abstract string // an abstract unix socket name (without the leading @)
	Admin    string // URL of an "admin API" on host loopback
}

// StartHost starts those services; prefix names the socket files.
func StartHost(t *testing.T, prefix string) *Host {
	t.Helper()
	h := &Host{}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, h.TCPPort, _ = net.SplitHostPort(ln.Addr().String())
	pc, err := net.ListenPacket("udp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			h.UDPSeen.Add(1)
			_, _ = pc.WriteTo(buf[:n], addr)
		}
	}()
	_, h.UDPPort, _ = net.SplitHostPort(pc.LocalAddr().String())
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			h.ExtIP = ipn.IP.String()
			break
		}
	}
	h.UnixPath = filepath.Join(os.TempDir(), fmt.Sprintf("%s-%d.sock", prefix, os.Getpid()))
	_ = os.Remove(h.UnixPath)
	ul, err := net.Listen("unix", h.UnixPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ul.Close() })
	if err := os.Chmod(h.UnixPath, 0o777); err != nil {
		t.Fatal(err)
	}
	h.Abstract = fmt.Sprintf("%s-%d", prefix, os.Getpid())
	al, err := net.Listen("unix", "@"+h.Abstract)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ESCAPED admin")
	}))
	t.Cleanup(admin.Close)
	h.Admin = admin.URL
	return h
}

// StaticResolver answers every name with the same addresses (test upstreams on loopback).
type StaticResolver []netip.Addr

func (s StaticResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return s, nil
}

// Recorder is an in-memory audit sink.
type Recorder struct {
	mu sync.Mutex
	ev []audit.Event
}

func (r *Recorder) Record(_ context.Context, ev *audit.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ev = append(r.ev, *ev)
	return nil
}

// Events returns a copy of what was recorded.
func (r *Recorder) Events() []audit.Event { return r.Since(0) }

// Since returns a copy of what was recorded after the first n events.
func (r *Recorder) Since(n int) []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n > len(r.ev) {
		return nil
	}
	return append([]audit.Event(nil), r.ev[n:]...)
}

// Len is how many events were recorded.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ev)
}

// WaitSince returns what was recorded after the first n events once ok accepts it, or
// what there is after d. An allowed request's event is recorded when the proxy closes the
// upstream body, which can be just after the client has read the whole response.
func (r *Recorder) WaitSince(n int, d time.Duration, ok func([]audit.Event) bool) []audit.Event {
	deadline := time.Now().Add(d)
	for {
		evs := r.Since(n)
		if ok(evs) || time.Now().After(deadline) {
			return evs
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Run runs cmd with its stdout and stderr captured and returns them with its exit status;
// the test fails if cmd could not be started or waited for.
func Run(t testing.TB, cmd *exec.Cmd) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", strings.Join(cmd.Args, " "), err)
	}
	return out.String(), errOut.String(), code
}
