package sandbox

import (
	"encoding/json"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// The parent and a sandbox's holder talk over SOCK_SEQPACKET socket pairs: one JSON message
// per packet, file descriptors passed alongside with SCM_RIGHTS.

// holderConfig tells the holder how to build the sandbox's file system.
type holderConfig struct {
	ID            string   `json:"id"`
	Rootfs        string   `json:"rootfs"`
	RootPaths     []string `json:"root_paths"`
	ReadOnlyPaths []string `json:"read_only_paths,omitempty"`
	NewRoot       string   `json:"new_root"`
	Workspace     string   `json:"workspace,omitempty"`
	WorkspaceMode string   `json:"workspace_mode,omitempty"`
	LowerDir      string   `json:"lower_dir,omitempty"`
	UpperDir      string   `json:"upper_dir,omitempty"`
	WorkDir       string   `json:"work_dir,omitempty"`
	TmpSize       int64    `json:"tmp_size"`
	UIDBase       int      `json:"uid_base"`
	CABundle      []byte   `json:"ca_bundle,omitempty"`
	// File descriptor numbers in the holder (ExtraFiles start at 3); -1 when absent.
	IdmapFD    int   `json:"idmap_fd"`
	CgroupFDs  []int `json:"cgroup_fds,omitempty"`
	UnifiedRun bool  `json:"unified_run"`
}

// holderReply answers a holderConfig.
type holderReply struct {
	Error string `json:"error,omitempty"`
}

// runRequest asks the holder to start one command. Its file descriptors, in order: the run
// connection, stdin, stdout, stderr and, when CgroupProcs is set, a v2 cgroup.procs file.
type runRequest struct {
	Args        []string `json:"args"`
	Env         []string `json:"env"`
	Dir         string   `json:"dir"`
	CgroupProcs bool     `json:"cgroup_procs"`
	Writable    []string `json:"writable"`
}

// runMessage flows on a run connection: the holder reports start and exit; the parent sends
// Kill to end the run's whole process tree.
type runMessage struct {
	Started  bool   `json:"started,omitempty"`
	Exited   bool   `json:"exited,omitempty"`
	Error    string `json:"error,omitempty"`
	ExitCode int    `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	UserNS   int64  `json:"user_ns,omitempty"`
	SysNS    int64  `json:"sys_ns,omitempty"`
	MaxRSS   int64  `json:"max_rss,omitempty"`
	Kill     bool   `json:"kill,omitempty"`
}

const maxPacket = 1 << 20

func sendMsg(fd int, v any, files ...int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
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

// recvMsg reads one message; it returns os.ErrClosed when the peer has gone.
func recvMsg(fd int, v any) ([]*os.File, error) {
	buf := make([]byte, maxPacket)
	oob := make([]byte, unix.CmsgSpace(8*4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("receive message: %w", err)
		}
		if n == 0 && oobn == 0 {
			return nil, os.ErrClosed
		}
		var files []*os.File
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return nil, fmt.Errorf("parse control message: %w", err)
			}
			for _, m := range msgs {
				fds, err := unix.ParseUnixRights(&m)
				if err != nil {
					return nil, fmt.Errorf("parse rights: %w", err)
				}
				for _, f := range fds {
					files = append(files, os.NewFile(uintptr(f), "passed"))
				}
			}
		}
		if err := json.Unmarshal(buf[:n], v); err != nil {
			closeFiles(files)
			return nil, fmt.Errorf("decode message: %w", err)
		}
		return files, nil
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
