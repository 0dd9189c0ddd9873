//go:build e2e

package clients_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// squid starts Debian's squid on loopback as a parent proxy that knows parent.test (and
// requires the given Basic credentials), and returns its address and access log path.
func squid(t *testing.T, user, password string) (addr, accessLog string) {
	t.Helper()
	bin, err := exec.LookPath("squid")
	if err != nil {
		if _, err = os.Stat("/usr/sbin/squid"); err != nil {
			t.Skip("squid is not installed (Debian package squid)")
		}
		bin = "/usr/sbin/squid"
	}
	dir, err := os.MkdirTemp("", "airlock-squid-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr = ln.Addr().String()
	ln.Close()
	os.WriteFile(filepath.Join(dir, "hosts"), []byte("127.0.0.1 parent.test\n"), 0o644)
	hash, err := exec.Command("openssl", "passwd", "-1", password).Output()
	if err != nil {
		t.Skipf("openssl passwd: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "passwd"), []byte(user+":"+strings.TrimSpace(string(hash))+"\n"), 0o644)
	accessLog = filepath.Join(dir, "access.log")
	conf := fmt.Sprintf(`http_port %s
auth_param basic program /usr/lib/squid/basic_ncsa_auth %s/passwd
acl authed proxy_auth REQUIRED
acl local src 127.0.0.1
http_access deny !authed
http_access allow local
http_access deny all
hosts_file %s/hosts
pid_filename %s/squid.pid
access_log stdio:%s
cache_log %s/cache.log
cache deny all
cache_mem 8 MB
coredump_dir %s
shutdown_lifetime 1 seconds
`, addr, dir, dir, dir, accessLog, dir, dir)
	if _, err := os.Stat("/usr/lib/squid/basic_ncsa_auth"); err != nil {
		t.Skip("squid's basic_ncsa_auth helper is missing")
	}
	cf := filepath.Join(dir, "squid.conf")
	os.WriteFile(cf, []byte(conf), 0o644)
	// -n: squid names its shared-memory segments (/dev/shm/NAME-cf__*.shm) after its service
	// name, "squid" by default, which a squid the Debian package started also holds: a
	// name of our own keeps the two apart (and two runs of this test).
	service := "airlocktest" + strconv.Itoa(os.Getpid()) + strconv.Itoa(int(time.Now().UnixNano()%1e6))
	cmd := exec.Command(bin, "-N", "-n", service, "-f", cf)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		shm, _ := filepath.Glob("/dev/shm/" + service + "-*")
		for _, f := range shm {
			os.Remove(f)
		}
	})
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if i > 150 {
			log, _ := os.ReadFile(filepath.Join(dir, "cache.log"))
			t.Fatalf("squid did not start: %v\n%s", err, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return addr, accessLog
}

// TestParentProxy: airlock's own connections go through a parent proxy (squid) with
// CONNECT and credentials; the dial guard still refuses what airlock resolves to a blocked
// address before the parent sees anything.
func TestParentProxy(t *testing.T) {
	ctx := context.Background()
	addr, accessLog := squid(t, "airlock", "parent-secret")

	upCA, _ := ca.New()
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "parent hello %s", r.URL.Path)
	}))
	up.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return upCA.Leaf(h.ServerName) }}
	up.StartTLS()
	t.Cleanup(up.Close)
	upURL, _ := url.Parse(up.URL)

	eng := e2etest.Engine(t, `package airlock
decision := {"action": "allow", "rule": "all"}
`)
	aca, _ := ca.New()
	roots := x509.NewCertPool()
	roots.AddCert(upCA.Certificate())
	newProxy := func(allow []netip.Prefix, auth string) *proxy.Proxy {
		pu, err := proxy.ParseParentURL("http://" + addr)
		if err != nil {
			t.Fatal(err)
		}
		p, err := proxy.New(proxy.Options{Decider: eng, CA: aca, UpstreamCAs: roots, AllowPrivate: allow,
			Auditor:  &e2etest.Recorder{},
			Resolver: e2etest.StaticResolver{netip.MustParseAddr("127.0.0.1")},
			Parent: proxy.ParentProxy{URL: pu, Auth: func(context.Context) (string, error) {
				return "Basic " + auth, nil
			}}})
		if err != nil {
			t.Fatal(err)
		}
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		go p.Serve(ln)
		t.Cleanup(func() { p.Shutdown(context.Background()) })
		return withAddr(p, ln.Addr().String())
	}
	get := func(proxyAddr, path string) (int, string) {
		pool := x509.NewCertPool()
		pool.AddCert(aca.Certificate())
		pu, _ := url.Parse("http://" + proxyAddr)
		c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}}}
		resp, err := c.Get("https://parent.test:" + upURL.Port() + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	b64 := func(s string) string { return basic(s) }

	loop := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	p := newProxy(loop, b64("airlock:parent-secret"))
	if code, body := get(addrOf(p), "/through-parent"); code != 200 || !strings.Contains(body, "parent hello /through-parent") {
		t.Fatalf("through the parent: %d %s", code, body)
	}
	p.Shutdown(ctx) // closes the idle upstream connection: squid logs a tunnel when it ends
	waitLog := func(substr string) bool {
		for i := 0; i < 30; i++ {
			b, _ := os.ReadFile(accessLog)
			if strings.Contains(string(b), substr) {
				return true
			}
			time.Sleep(100 * time.Millisecond)
		}
		return false
	}
	if !waitLog("CONNECT parent.test:" + upURL.Port()) {
		b, _ := os.ReadFile(accessLog)
		t.Errorf("squid's access log shows no CONNECT to parent.test:\n%s", b)
	}

	// Wrong credentials: the parent refuses, airlock answers with an upstream error.
	bad := newProxy(loop, b64("airlock:wrong"))
	if code, body := get(addrOf(bad), "/bad-auth"); code == 200 {
		t.Errorf("wrong parent credentials were accepted: %d %s", code, body)
	}

	// The guard: parent.test resolves (for airlock) to loopback, which this proxy may not
	// dial; the parent never sees the CONNECT.
	guarded := newProxy(nil, b64("airlock:parent-secret"))
	if code, body := get(addrOf(guarded), "/guarded"); code != 403 {
		t.Errorf("a blocked address behind the parent: %d %s, want 403", code, body)
	}
	// squid writes a refused CONNECT's line when its connection ends, which may be after
	// airlock has answered: wait for it (a third line would still fail below).
	bad.Shutdown(ctx)
	guarded.Shutdown(ctx)
	var b []byte
	for i := 0; i < 50; i++ {
		if b, _ = os.ReadFile(accessLog); strings.Count(string(b), "CONNECT parent.test") >= 2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := strings.Count(string(b), "CONNECT parent.test"); n != 2 {
		t.Errorf("squid saw %d CONNECTs, want 2 (the allowed one and the one with wrong credentials):\n%s", n, b)
	}
	if strings.Contains(string(b), "parent-secret") {
		t.Errorf("the parent's password is in its access log")
	}
}

var proxyAddrs = map[*proxy.Proxy]string{}

func withAddr(p *proxy.Proxy, a string) *proxy.Proxy { proxyAddrs[p] = a; return p }
func addrOf(p *proxy.Proxy) string                   { return proxyAddrs[p] }

func basic(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
