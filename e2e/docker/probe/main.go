// Command probe tries one way out of a sandbox and prints ESCAPED when it gets through.
// The Docker e2e tests build it static and bind it into sandbox containers, whose busybox
// image has no python.
//
//	probe tcp HOST:PORT | udp HOST:PORT | unix PATH | dns NAME | socket FAMILY TYPE [PROTO] | ptrace PID
//	probe fill fds|ptys MAX [hold]
//
// fill opens files (/dev/null) or pseudo-terminals (/dev/ptmx) until MAX or an error, after
// trying to raise its open-file limit, prints "AT-BOUND COUNT ERRNO SOFT HARD RAISED" and,
// with hold, sleeps holding them.
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) >= 4 && os.Args[1] == "fill" {
		fill(os.Args[2], os.Args[3], len(os.Args) > 4 && os.Args[4] == "hold")
		return
	}
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: probe tcp|udp|unix|dns|socket|ptrace ARG...")
		os.Exit(2)
	}
	if err := probe(os.Args[1], os.Args[2:]); err != nil {
		fmt.Println("refused:", err)
		os.Exit(1)
	}
	fmt.Println("ESCAPED")
}

func probe(kind string, args []string) error {
	switch kind {
	case "tcp", "unix":
		c, err := net.DialTimeout(kind, args[0], 3*time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	case "udp":
		c, err := net.DialTimeout("udp", args[0], 3*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write([]byte("x")); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = c.Read(make([]byte, 16))
		return err
	case "dns":
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		addrs, err := (&net.Resolver{PreferGo: true}).LookupHost(ctx, args[0])
		if err == nil && len(addrs) == 0 {
			return fmt.Errorf("no addresses")
		}
		return err
	case "socket":
		fam, err1 := strconv.Atoi(args[0])
		typ, err2 := strconv.Atoi(args[1])
		if err1 != nil || err2 != nil {
			return fmt.Errorf("socket FAMILY TYPE: numbers")
		}
		proto := 0
		if len(args) > 2 {
			proto, _ = strconv.Atoi(args[2])
		}
		fd, err := syscall.Socket(fam, typ, proto)
		if err != nil {
			return err
		}
		return syscall.Close(fd)
	case "ptrace":
		pid, err := strconv.Atoi(args[0])
		if err != nil {
			return err
		}
		if err := syscall.PtraceAttach(pid); err != nil {
			return err
		}
		return syscall.PtraceDetach(pid)
	}
	return fmt.Errorf("unknown probe %q", kind)
}

func fill(kind, maxArg string, hold bool) {
	limit, _ := strconv.Atoi(maxArg)
	var lim syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim)
	soft, hard := lim.Cur, lim.Max
	raised := "kept"
	up := syscall.Rlimit{Cur: hard * 2, Max: hard * 2}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up) == nil {
		raised = "raised"
	}
	path := os.DevNull
	if kind == "ptys" {
		path = "/dev/ptmx"
	}
	n, errno := 0, 0
	for n < limit {
		if _, err := syscall.Open(path, syscall.O_RDWR|syscall.O_NOCTTY, 0); err != nil {
			if e, ok := err.(syscall.Errno); ok {
				errno = int(e)
			}
			break
		}
		n++
	}
	fmt.Println("AT-BOUND", n, errno, soft, hard, raised)
	if hold {
		// pause(2): a timer would need the runtime's epoll descriptor, and none is left.
		syscall.Syscall(syscall.SYS_PAUSE, 0, 0, 0)
	}
}
