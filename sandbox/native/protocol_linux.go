package native

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// The parent and a sandbox's holder talk over SOCK_SEQPACKET socket pairs, one message per
// packet, file descriptors passed alongside with SCM_RIGHTS. The holder is C code when the
// binary is built with cgo (stage_linux.c), Go otherwise (holder_linux.go); both read the
// same messages.
//
// Parent → holder: a packet of fields, each a 4-byte little-endian length and that many
// bytes; the first field names the message ("setup", "run", "kill").
// Holder → parent: one JSON object per packet (holderReply, runMessage).

// setupMessage tells the holder how to build the sandbox. Fields: "setup", hostname, uid
// base, seccomp program (struct sock_filter array), Landlock handled-access mask, Landlock
// scopes, cgroup.procs descriptors (comma-separated numbers in the holder, may be empty),
// then the mount plan: each op's kind, description and arguments (see mounts_linux.go).
type setupMessage struct {
	Hostname  string
	UIDBase   int
	Seccomp   []byte
	Landlock  landlockRules
	CgroupFDs []int
	Ops       []mountOp
}

// landlockRules is what a command's Landlock ruleset handles; zero when the kernel has none.
type landlockRules struct {
	HandledFS uint64
	Scoped    uint64
}

// holderReply answers a setupMessage. Errno, when set, is the failing call's error number.
type holderReply struct {
	Error string `json:"error,omitempty"`
	Errno int    `json:"errno,omitempty"`
}

// runRequest asks the holder to start one command. Its file descriptors, in order: the run
// connection, stdin, stdout, stderr and, when CgroupProcs is set, a v2 cgroup.procs file.
// Fields: "run", dir, cgroup-procs flag, tty flag, argument count, arguments,
// writable-directory count, writable directories, then the environment. With TTY, stdin
// is a terminal (the slave of one of the sandbox's own) that the command takes as its
// controlling terminal, in a session of its own.
type runRequest struct {
	Args        []string
	Env         []string
	Dir         string
	CgroupProcs bool
	TTY         bool
	Writable    []string
}

// runMessage flows from the holder on a run connection: start, then exit. The parent ends a
// run's whole process tree by sending "kill" on it (or by closing it).
type runMessage struct {
	Started  bool   `json:"started,omitempty"`
	Exited   bool   `json:"exited,omitempty"`
	Error    string `json:"error,omitempty"`
	Errno    int    `json:"errno,omitempty"`
	ExitCode int    `json:"exit_code,omitempty"`
	Signum   int    `json:"signum,omitempty"`
	UserNS   int64  `json:"user_ns,omitempty"`
	SysNS    int64  `json:"sys_ns,omitempty"`
	MaxRSS   int64  `json:"max_rss,omitempty"`
}

// err is the holder's error, wrapping the errno so that errors.Is works.
func (r holderReply) err() error {
	return holderError(r.Error, r.Errno)
}

func holderError(msg string, errno int) error {
	switch {
	case msg == "":
		return nil
	case errno != 0:
		return fmt.Errorf("%s: %w", msg, unix.Errno(errno))
	default:
		return errors.New(msg)
	}
}

const maxPacket = 1 << 20

func (m *setupMessage) fields() [][]byte {
	cg := ""
	for i, fd := range m.CgroupFDs {
		if i > 0 {
			cg += ","
		}
		cg += strconv.Itoa(fd)
	}
	f := [][]byte{[]byte("setup"), []byte(m.Hostname), num(int64(m.UIDBase)), m.Seccomp,
		num(int64(m.Landlock.HandledFS)), num(int64(m.Landlock.Scoped)), []byte(cg)}
	for _, op := range m.Ops {
		f = append(f, []byte(op.Kind), []byte(op.Desc))
		for _, a := range op.Args {
			f = append(f, []byte(a))
		}
	}
	return f
}

func (r *runRequest) fields() [][]byte {
	flag := func(b bool) []byte {
		if b {
			return []byte("1")
		}
		return []byte("0")
	}
	f := [][]byte{[]byte("run"), []byte(r.Dir), flag(r.CgroupProcs), flag(r.TTY), num(int64(len(r.Args)))}
	for _, a := range r.Args {
		f = append(f, []byte(a))
	}
	f = append(f, num(int64(len(r.Writable))))
	for _, w := range r.Writable {
		f = append(f, []byte(w))
	}
	for _, e := range r.Env {
		f = append(f, []byte(e))
	}
	return f
}

func num(n int64) []byte { return []byte(strconv.FormatInt(n, 10)) }

func encodeFields(fields [][]byte) []byte {
	n := 0
	for _, f := range fields {
		n += 4 + len(f)
	}
	b := make([]byte, 0, n)
	for _, f := range fields {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

func decodeFields(b []byte) ([][]byte, error) {
	var f [][]byte
	for len(b) > 0 {
		if len(b) < 4 {
			return nil, errors.New("truncated field length")
		}
		n := binary.LittleEndian.Uint32(b)
		b = b[4:]
		if uint64(n) > uint64(len(b)) {
			return nil, errors.New("truncated field")
		}
		f = append(f, b[:n])
		b = b[n:]
	}
	return f, nil
}

// sendFields sends one parent → holder message.
func sendFields(fd int, fields [][]byte, files ...int) error {
	return sendPacket(fd, encodeFields(fields), files...)
}

// sendJSON sends one holder → parent message.
func sendJSON(fd int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	return sendPacket(fd, b)
}

func sendPacket(fd int, b []byte, files ...int) error {
	if len(b) > maxPacket {
		return fmt.Errorf("message of %d bytes exceeds %d", len(b), maxPacket)
	}
	var oob []byte
	if len(files) > 0 {
		oob = unix.UnixRights(files...)
	}
	if err := unix.Sendmsg(fd, b, oob, nil, 0); err != nil {
		return fmt.Errorf("send message: %w", err)
	}
	return nil
}

// recvJSON reads one holder → parent message; os.ErrClosed when the peer has gone.
func recvJSON(fd int, v any) error {
	b, files, err := recvPacket(fd)
	closeFiles(files)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode message: %w", err)
	}
	return nil
}

// recvFields reads one parent → holder message; os.ErrClosed when the peer has gone.
func recvFields(fd int) ([][]byte, []*os.File, error) {
	b, files, err := recvPacket(fd)
	if err != nil {
		return nil, nil, err
	}
	f, err := decodeFields(b)
	if err != nil || len(f) == 0 {
		closeFiles(files)
		return nil, nil, fmt.Errorf("decode message: %v", err)
	}
	return f, files, nil
}

func recvPacket(fd int) ([]byte, []*os.File, error) {
	buf := make([]byte, maxPacket)
	oob := make([]byte, unix.CmsgSpace(8*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("receive message: %w", err)
		}
		if n == 0 && oobn == 0 {
			return nil, nil, os.ErrClosed
		}
		var files []*os.File
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return nil, nil, fmt.Errorf("parse control message: %w", err)
			}
			for _, m := range msgs {
				fds, err := unix.ParseUnixRights(&m)
				if err != nil {
					closeFiles(files)
					return nil, nil, fmt.Errorf("parse rights: %w", err)
				}
				for _, f := range fds {
					files = append(files, os.NewFile(uintptr(f), "passed"))
				}
			}
		}
		return buf[:n], files, nil
	}
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// seqpacketPair returns a connected SOCK_SEQPACKET pair, close-on-exec.
func seqpacketPair() (a, b *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	// One message carries the CA bundle (system roots are ~220 KiB), more than the default
	// socket buffer admits in one datagram: raise it (root may exceed wmem_max).
	for _, fd := range fds {
		if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, maxPacket) != nil {
			_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, maxPacket)
		}
	}
	return os.NewFile(uintptr(fds[0]), "seqpacket"), os.NewFile(uintptr(fds[1]), "seqpacket"), nil
}
