// Command probe tries one way out of a sandbox and prints ESCAPED when it gets through.
// The Docker e2e tests build it static and bind it into sandbox containers, whose busybox
// image has no python.
//
//	probe tcp HOST:PORT | udp HOST:PORT | unix PATH | dns NAME | socket FAMILY TYPE [PROTO] | ptrace PID
//	probe fill fds|ptys MAX [hold]
//	probe usercounts INSTANCES WATCHES TIMERS [hold]
//	probe tcpfill CONNECTIONS [hold]
//	probe limits
//
// fill opens files (/dev/null) or pseudo-terminals (/dev/ptmx) until MAX or an error, after
// trying to raise its open-file limit, prints "AT-BOUND COUNT ERRNO SOFT HARD RAISED" and,
// with hold, sleeps holding them. usercounts takes inotify instances, then watches, then
// POSIX timers (each holds a queued signal) until refused or the number given, and prints
// "AT-BOUND INSTANCES ERRNO WATCHES ERRNO TIMERS ERRNO". tcpfill writes, without reading,
// into connections over loopback until none takes more and prints "AT-BOUND BYTES". limits
// prints "LIMITS SIGPENDING-SOFT SIGPENDING-HARD MSGQUEUE-SOFT MSGQUEUE-HARD".
package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

func main() {
	hold := len(os.Args) > 0 && os.Args[len(os.Args)-1] == "hold"
	switch {
	case len(os.Args) >= 4 && os.Args[1] == "fill":
		fill(os.Args[2], os.Args[3], hold)
		return
	case len(os.Args) >= 5 && os.Args[1] == "usercounts":
		userCounts(atoi(os.Args[2]), atoi(os.Args[3]), atoi(os.Args[4]), hold)
		return
	case len(os.Args) >= 3 && os.Args[1] == "tcpfill":
		tcpFill(atoi(os.Args[2]), hold)
		return
	case len(os.Args) == 2 && os.Args[1] == "limits":
		var sp, mq syscall.Rlimit
		syscall.Getrlimit(11, &sp) // RLIMIT_SIGPENDING
		syscall.Getrlimit(12, &mq) // RLIMIT_MSGQUEUE
		fmt.Println("LIMITS", sp.Cur, sp.Max, mq.Cur, mq.Max)
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
		pause()
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func errnoOf(err error) int {
	if e, ok := err.(syscall.Errno); ok {
		return int(e)
	}
	return -1
}

func pause() {
	// pause(2): a timer would need the runtime's epoll descriptor, which may be gone.
	syscall.Syscall(syscall.SYS_PAUSE, 0, 0, 0)
}

func userCounts(maxInst, maxWatch, maxTimers int, hold bool) {
	var inst []int
	errInst := 0
	for len(inst) < maxInst {
		fd, err := syscall.InotifyInit1(0)
		if err != nil {
			errInst = errnoOf(err)
			break
		}
		inst = append(inst, fd)
	}
	dir, _ := os.MkdirTemp("", "watch")
	per := 1
	if len(inst) > 0 {
		per = (maxWatch + len(inst) - 1) / len(inst)
	}
	var files []string
	for i := 0; i < per && i < 4000; i++ {
		p := filepath.Join(dir, strconv.Itoa(i))
		f, _ := os.Create(p)
		f.Close()
		files = append(files, p)
	}
	watches, errWatch := 0, 0
fill:
	for _, fd := range inst {
		for _, p := range files {
			if watches >= maxWatch {
				break fill
			}
			if _, err := syscall.InotifyAddWatch(fd, p, syscall.IN_MODIFY); err != nil {
				errWatch = errnoOf(err)
				break fill
			}
			watches++
		}
	}
	// struct sigevent with SIGEV_NONE: each timer still holds a preallocated signal.
	var ev [64]byte
	*(*int32)(unsafe.Pointer(&ev[12])) = 1 // sigev_notify = SIGEV_NONE
	timers, errTimer := 0, 0
	for timers < maxTimers {
		var id int32
		if _, _, e := syscall.Syscall(syscall.SYS_TIMER_CREATE, 1, uintptr(unsafe.Pointer(&ev)), uintptr(unsafe.Pointer(&id))); e != 0 {
			errTimer = int(e)
			break
		}
		timers++
	}
	fmt.Println("AT-BOUND", len(inst), errInst, watches, errWatch, timers, errTimer)
	if hold {
		pause()
	}
}

func tcpFill(n int, hold bool) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	var clients []int
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(1)
		}
		s, err := ln.Accept()
		if err != nil {
			fmt.Println("accept:", err)
			os.Exit(1)
		}
		defer s.Close()
		f, _ := c.(*net.TCPConn).File() // a blocking-mode duplicate: written with MSG_DONTWAIT
		clients = append(clients, int(f.Fd()))
		c.Close()
	}
	chunk := make([]byte, 65536)
	total := 0
	for round := 0; round < 4; round++ {
		for _, fd := range clients {
			for {
				k, err := syscall.SendmsgN(fd, chunk, nil, nil, syscall.MSG_DONTWAIT)
				if err != nil || k == 0 {
					break
				}
				total += k
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	rmem, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_rmem")
	wmem, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem")
	fmt.Println("AT-BOUND", total, lastField(rmem), lastField(wmem))
	if hold {
		pause()
	}
}

func lastField(b []byte) string {
	var f []string
	cur := ""
	for _, c := range string(b) {
		if c == ' ' || c == '\t' || c == '\n' {
			if cur != "" {
				f = append(f, cur)
			}
			cur = ""
			continue
		}
		cur += string(c)
	}
	if cur != "" {
		f = append(f, cur)
	}
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}
