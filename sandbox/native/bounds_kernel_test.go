package native_test

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/sandboxtest"
)

// userCountsProbe prints what the kernel counts a sandbox's per-user objects against: the
// owner of its user namespace as seen inside (0: the sandbox's own host uid, the root of its
// uid range; 65534: a host uid outside it, such as the host's root), the namespace's
// inotify maxima and the sigpending and msgqueue limits.
const userCountsProbe = `
import fcntl, os, resource
fd = os.open("/proc/self/ns/user", os.O_RDONLY)
b = bytearray(4)
fcntl.ioctl(fd, 0xb704, b)  # NS_GET_OWNER_UID
owner = int.from_bytes(b, "little")
def sysctl(n):
    return open("/proc/sys/user/" + n).read().strip()
print("owner", owner)
print("max_inotify_instances", sysctl("max_inotify_instances"))
print("max_inotify_watches", sysctl("max_inotify_watches"))
print("sigpending", *resource.getrlimit(resource.RLIMIT_SIGPENDING))
print("msgqueue", *resource.getrlimit(resource.RLIMIT_MSGQUEUE))
`

// fillUserCounts takes inotify instances until refused, then watches (on files of a
// directory, from every instance) until refused, then queues real-time signals to itself
// until refused, up to the given numbers each, and prints what it got and the errors.
const fillUserCounts = `
import ctypes, os, signal, sys, tempfile, time
libc = ctypes.CDLL(None, use_errno=True)
max_inst, max_watch, max_sig = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
inst, err_inst = [], 0
while len(inst) < max_inst:
    fd = libc.inotify_init1(0)
    if fd < 0:
        err_inst = ctypes.get_errno(); break
    inst.append(fd)
d = tempfile.mkdtemp()
files = []
per = max(1, -(-max_watch // max(1, len(inst))))
for i in range(min(per, 4000)):
    p = os.path.join(d, str(i)).encode(); open(p, "w").close(); files.append(p)
watches, err_watch = 0, 0
for fd in inst:
    for p in files:
        if watches >= max_watch: break
        if libc.inotify_add_watch(fd, p, 0x2) < 0:
            err_watch = ctypes.get_errno(); break
        watches += 1
    if err_watch or watches >= max_watch: break
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
sigs, err_sig = 0, 0
while sigs < max_sig:
    if libc.sigqueue(os.getpid(), signal.SIGRTMIN, ctypes.c_void_p(0)) < 0:
        err_sig = ctypes.get_errno(); break
    sigs += 1
print("AT-BOUND", len(inst), err_inst, watches, err_watch, sigs, err_sig, flush=True)
if len(sys.argv) > 4: time.sleep(600)
`

// TestUserCountsBound: what the kernel counts per user (inotify instances and watches,
// queued signals, message queue bytes) a sandbox's processes are counted as the sandbox's
// own host uid, within small maxima of its own; one sandbox at those bounds leaves the
// host's root and a second sandbox theirs.
func TestUserCountsBound(t *testing.T) {
	s := newSandbox(t, sandbox.Options{})
	res := run(t, s, "python3 -c '"+strings.ReplaceAll(userCountsProbe, "'", `'"'"'`)+"'")
	got := map[string][]string{}
	for _, line := range strings.Split(string(res.Stdout), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			got[f[0]] = f[1:]
		}
	}
	want := map[string][]string{
		"owner":                 {"0"},
		"max_inotify_instances": {fmt.Sprint(sandbox.InotifyInstances)},
		"max_inotify_watches":   {fmt.Sprint(sandbox.InotifyWatches)},
		"sigpending":            {fmt.Sprint(sandbox.SigpendingLimit), fmt.Sprint(sandbox.SigpendingLimit)},
		"msgqueue":              {fmt.Sprint(sandbox.MsgqueueLimit), fmt.Sprint(sandbox.MsgqueueLimit)},
	}
	for k, v := range want {
		if !slices.Equal(got[k], v) {
			// Checked before filling anything: a sandbox counted as the host's root would
			// take the host's own counts.
			t.Fatalf("%s: got %v, want %v (stdout %q, stderr %q)", k, got[k], v, res.Stdout, res.Stderr)
		}
	}

	f, _ := holdAtBound(t, s, fillUserCounts, "100000", "1000000", "1000000", "hold")
	n := make([]int, len(f))
	for i := range f {
		fmt.Sscan(f[i], &n[i])
	}
	if n[0] != sandbox.InotifyInstances || n[1] != int(syscall.EMFILE) {
		t.Errorf("inotify instances: %d then errno %d; want %d, then EMFILE", n[0], n[1], sandbox.InotifyInstances)
	}
	if n[2] != sandbox.InotifyWatches || n[3] != int(syscall.ENOSPC) {
		t.Errorf("inotify watches: %d then errno %d; want %d, then ENOSPC", n[2], n[3], sandbox.InotifyWatches)
	}
	if n[4] > sandbox.SigpendingLimit || n[4] < sandbox.SigpendingLimit-64 || n[5] != int(syscall.EAGAIN) {
		t.Errorf("queued signals: %d then errno %d; want about %d, then EAGAIN", n[4], n[5], sandbox.SigpendingLimit)
	}
	// The host's root and a second sandbox take their own.
	host := exec.Command("python3", "-c", fillUserCounts, "16", "2000", "2000")
	out, err := host.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "AT-BOUND 16 0 2000 0 2000 0") {
		t.Errorf("the host's root, while a sandbox is at its bounds: %s (%v)", out, err)
	}
	other := newSandbox(t, sandbox.Options{})
	res = run(t, other, "python3 -c '"+strings.ReplaceAll(fillUserCounts, "'", `'"'"'`)+"' 16 2000 500")
	if !strings.HasPrefix(string(res.Stdout), "AT-BOUND 16 0 2000 0 500 0") {
		t.Errorf("a second sandbox, while another is at its bounds: %s %s", res.Stdout, res.Stderr)
	}
}

// fillSocketBuffers opens connections over the sandbox's own loopback and writes into them
// without reading, until no connection takes more; it prints the bytes written and the
// per-namespace TCP buffer maxima.
const fillSocketBuffers = `
import socket, sys, time
n = int(sys.argv[1])
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(n)
clients, held = [], []
for _ in range(n):
    c = socket.create_connection(srv.getsockname()); clients.append(c); held.append(srv.accept()[0])
for c in clients:
    c.setblocking(False)
total, chunk = 0, b"x" * 65536
for _ in range(4):
    for c in clients:
        while True:
            try:
                k = c.send(chunk)
            except (BlockingIOError, OSError):
                break
            if k == 0:
                break
            total += k
    time.sleep(0.2)
rmem = open("/proc/sys/net/ipv4/tcp_rmem").read().split()[2]
wmem = open("/proc/sys/net/ipv4/tcp_wmem").read().split()[2]
print("AT-BOUND", total, rmem, wmem, flush=True)
time.sleep(600)
`

// hostTCPPages is the kernel's TCP memory in use, machine-wide, in pages.
func hostTCPPages(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/net/sockstat")
	must(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "TCP:" {
			for i := 1; i+1 < len(f); i += 2 {
				if f[i] == "mem" {
					var n int64
					fmt.Sscan(f[i+1], &n)
					return n
				}
			}
		}
	}
	t.Fatal("no TCP memory in /proc/net/sockstat")
	return 0
}

// TestSocketMemoryBound: socket buffers a sandbox fills over its own loopback are charged
// to it and bounded (on cgroup v1 its kmem.tcp limit; each socket by its network
// namespace's tcp_rmem and tcp_wmem), not taken from the host's TCP memory without bound.
func TestSocketMemoryBound(t *testing.T) {
	s := newSandbox(t, sandbox.Options{ID: "sbx-tcp-bound", Memory: 64 << 20, Proxy: sandboxtest.NewProxy()})
	limit := sandbox.TCPMemoryLimit(64 << 20)
	if dir := "/sys/fs/cgroup/memory/" + "airlock/sbx-tcp-bound"; exists(dir) {
		b, err := os.ReadFile(dir + "/memory.kmem.tcp.limit_in_bytes")
		if got := strings.TrimSpace(string(b)); err != nil || got != fmt.Sprint(limit) {
			t.Fatalf("the sandbox's kmem.tcp limit is %q (%v), want %d", got, err, limit)
		}
	}
	before := hostTCPPages(t)
	f, _ := holdAtBound(t, s, fillSocketBuffers, "100")
	var total, rmem, wmem int64
	fmt.Sscan(f[0], &total)
	fmt.Sscan(f[1], &rmem)
	fmt.Sscan(f[2], &wmem)
	if rmem > sandbox.TCPBufferMax || wmem > sandbox.TCPBufferMax {
		t.Errorf("tcp_rmem max %d, tcp_wmem max %d inside; want at most %d", rmem, wmem, sandbox.TCPBufferMax)
	}
	// To guarantee progress the kernel lets each connection take a segment or two past
	// any socket memory limit (docs/threat-model.md): the bound is the sandbox's limit and
	// that much per connection.
	const conns, progress = 100, 192 << 10
	bound := limit + conns*progress
	if total > bound {
		t.Errorf("%d connections buffered %d bytes; want at most the sandbox's %d and %d per connection", conns, total, limit, progress)
	}
	if total < 1<<20 {
		t.Errorf("%d connections buffered only %d bytes: the test did not fill them", conns, total)
	}
	// Other processes of the machine use TCP too: some slack.
	if grew := (hostTCPPages(t) - before) * int64(os.Getpagesize()); grew > bound+32<<20 {
		t.Errorf("the host's TCP memory grew by %d bytes; want at most about the sandbox's %d", grew, bound)
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// holdMappedFiles opens a file, maps a page of it and closes it, over and over: every
// mapping holds an open file of the host's file table, which the open-file limit does not
// count. It prints how many it held when refused (a killed process prints nothing more).
const holdMappedFiles = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
n = 0
while n < 200000:
    fd = os.open("/etc/hostname", os.O_RDONLY)
    p = libc.mmap(None, 4096, 1, 1, fd, 0)
    os.close(fd)
    if p in (None, ctypes.c_void_p(-1).value):
        break
    n += 1
    if n % 1000 == 0:
        print(n, flush=True)
print("held", n, flush=True)
`

// TestMemoryBoundedByDefault: a sandbox that sets no memory limit gets DefaultMemory, so
// that what the kernel charges to its memory cgroup (open files held through mappings
// among it) is bounded; with a small limit, mapping files past the open-file limit ends
// within it.
func TestMemoryBoundedByDefault(t *testing.T) {
	newSandbox(t, sandbox.Options{ID: "sbx-default-memory"})
	if dir := "/sys/fs/cgroup/memory/airlock/sbx-default-memory"; exists(dir) {
		b, err := os.ReadFile(dir + "/memory.limit_in_bytes")
		if got := strings.TrimSpace(string(b)); err != nil || got != fmt.Sprint(sandbox.DefaultMemory()) {
			t.Errorf("memory limit of a sandbox that sets none: %q (%v), want DefaultMemory %d", got, err, sandbox.DefaultMemory())
		}
	}
	if d := sandbox.DefaultMemory(); d < 256<<20 || d > 4<<30 {
		t.Errorf("DefaultMemory %d: want between 256 MiB and 4 GiB", d)
	}
	small := newSandbox(t, sandbox.Options{Memory: 16 << 20, Nofile: 64})
	res := run(t, small, "python3 -c '"+holdMappedFiles+"'")
	lines := strings.Fields(string(res.Stdout))
	var held int
	if len(lines) > 0 {
		fmt.Sscan(lines[len(lines)-1], &held)
	}
	if held < 1000 {
		t.Fatalf("the program held %d mapped files: it did not run (%s)", held, res.Stderr)
	}
	if res.ExitCode == 0 && strings.Contains(string(res.Stdout), "held 200000") || res.Usage.PeakMemory > 16<<20 {
		t.Errorf("mapping files in a 16 MiB sandbox: %d held, exit %d, peak %d; want it stopped within 16 MiB", held, res.ExitCode, res.Usage.PeakMemory)
	}
}
