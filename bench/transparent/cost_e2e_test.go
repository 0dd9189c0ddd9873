//go:build e2e

// Package transparent_test measures what transparent egress costs against HTTP_PROXY: the
// same HTTPS request, intercepted by the same proxy, from a client that either names the
// proxy (CONNECT) or dials the destination from inside a network namespace whose TCP is
// redirected to airlock (transparent). The proxy runs alone in the test process, the
// upstream and the load client in processes of their own (the client inside the
// namespace for the transparent case), so the CPU counted is the proxy's. Run as root:
//
//	go test -tags e2e -count=1 -v -run TestTransparentCost ./bench/transparent/
package transparent_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

func TestMain(m *testing.M) {
	switch os.Getenv("AIRLOCK_COST_HELPER") {
	case "upstream":
		upstreamMain()
	case "client":
		clientMain()
	default:
		os.Exit(m.Run())
	}
}

// upstreamMain serves 20 bytes over TLS with the leaf in $CERT/$KEY; prints its address.
func upstreamMain() {
	cert, err := tls.LoadX509KeyPair(os.Getenv("CERT"), os.Getenv("KEY"))
	if err != nil {
		panic(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		panic(err)
	}
	fmt.Println(ln.Addr().String())
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "0123456789abcdefghij")
	}))
}

// clientMain: $URL with $CONC workers, $N requests in all, through $PROXY when set, else
// dialling $DIAL (the address airlock's DNS gave) directly; $KEEPALIVE=0 opens a
// connection per request. It warms up, prints "ready", waits for a line, runs, prints "done".
func clientMain() {
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(os.Getenv("CA"))
	pool.AppendCertsFromPEM(caPEM)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 64,
		DisableKeepAlives: os.Getenv("KEEPALIVE") == "0"}
	if p := os.Getenv("PROXY"); p != "" {
		pu, _ := url.Parse(p)
		tr.Proxy = http.ProxyURL(pu)
	} else {
		dial := os.Getenv("DIAL")
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", dial)
		}
	}
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	target := os.Getenv("URL")
	get := func() {
		resp, err := c.Get(target)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(2)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			fmt.Println("status", resp.StatusCode)
			os.Exit(2)
		}
	}
	conc, _ := strconv.Atoi(os.Getenv("CONC"))
	n, _ := strconv.Atoi(os.Getenv("N"))
	var wg sync.WaitGroup
	for w := 0; w < conc; w++ { // warm: connections, leaf certificates, policy cache
		wg.Add(1)
		go func() { defer wg.Done(); get() }()
	}
	wg.Wait()
	fmt.Println("ready")
	bufio.NewReader(os.Stdin).ReadString('\n')
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n/conc; i++ {
				get()
			}
		}()
	}
	wg.Wait()
	fmt.Println("done")
}

// newNetns makes a network namespace and returns a path that keeps it open.
func newNetns(t *testing.T) string {
	t.Helper()
	done := make(chan error, 1)
	var f *os.File
	go func() {
		runtime.LockOSThread() // the thread ends with the goroutine, in the new namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		var err error
		f, err = os.Open("/proc/thread-self/ns/net")
		done <- err
	}()
	if err := <-done; err != nil {
		t.Skipf("new network namespace: %v (needs root)", err)
	}
	t.Cleanup(func() { f.Close() })
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd())
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestTransparentCost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		t.Skip("nsenter (util-linux) is missing")
	}
	ctx := context.Background()
	dir := t.TempDir()
	upCA, _ := ca.New()
	leaf, err := upCA.Leaf("upstream.test")
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, leaf, filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	up := exec.Command(os.Args[0])
	up.Env = append(os.Environ(), "AIRLOCK_COST_HELPER=upstream", "CERT="+filepath.Join(dir, "cert.pem"), "KEY="+filepath.Join(dir, "key.pem"))
	upOut, _ := up.StdoutPipe()
	up.Stderr = os.Stderr
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Process.Kill(); up.Wait() })
	upAddr, err := bufio.NewReader(upOut).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	_, upPort, _ := net.SplitHostPort(strings.TrimSpace(upAddr))
	target := "https://upstream.test:" + upPort + "/small"

	os.WriteFile(filepath.Join(dir, "p.rego"), []byte(`package airlock
decision := {"action": "allow", "rule": "bench"}
`), 0o600)
	eng, err := rego.New(ctx, rego.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	aca, _ := ca.New()
	os.WriteFile(filepath.Join(dir, "ca.pem"), aca.CertPEM(), 0o644)
	roots := x509.NewCertPool()
	roots.AddCert(upCA.Certificate())
	p, err := proxy.New(proxy.Options{Decider: eng, CA: aca, UpstreamCAs: roots, Auditor: &e2etest.Recorder{},
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver:     e2etest.StaticResolver{netip.MustParseAddr("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go p.Serve(ln)

	ns := newNetns(t)
	l, err := sandbox.ListenTransparentInNetns(ns)
	if err != nil {
		t.Fatal(err)
	}
	id := identity.Identity{ID: "bench"}
	for _, pl := range l.Proxy {
		defer p.Attach(pl, id)()
	}
	defer p.AttachTransparent(l.Transparent, l.DNS, id)()
	fake := askDNS(t, nsenter, ns)

	run := func(transparent, keepAlive bool, n int) time.Duration {
		var cmd *exec.Cmd
		env := []string{"AIRLOCK_COST_HELPER=client", "URL=" + target, "CA=" + filepath.Join(dir, "ca.pem"),
			"CONC=8", "N=" + strconv.Itoa(n), "KEEPALIVE=" + map[bool]string{true: "1", false: "0"}[keepAlive]}
		if transparent {
			cmd = exec.Command(nsenter, "--net="+ns, os.Args[0])
			env = append(env, "DIAL="+fake+":"+upPort)
		} else {
			cmd = exec.Command(os.Args[0])
			env = append(env, "PROXY=http://"+ln.Addr().String())
		}
		cmd.Env = append(os.Environ(), env...)
		in, _ := cmd.StdinPipe()
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Wait()
		r := bufio.NewReader(out)
		if s, _ := r.ReadString('\n'); s != "ready\n" {
			t.Fatalf("client: %q", s)
		}
		runtime.GC()
		start := cpuNow()
		io.WriteString(in, "go\n")
		if s, _ := r.ReadString('\n'); s != "done\n" {
			t.Fatalf("client: %q", s)
		}
		return (cpuNow() - start) / time.Duration(n)
	}
	median := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	// Rounds alternate the order, and the median is reported: the machine is shared.
	for _, ka := range []bool{true, false} {
		n, label := 4000, "keep-alive"
		if !ka {
			n, label = 400, "new connection per request"
		}
		var pr, tp []time.Duration
		for round := 0; round < 5; round++ {
			if round%2 == 0 {
				pr = append(pr, run(false, ka, n))
				tp = append(tp, run(true, ka, n))
			} else {
				tp = append(tp, run(true, ka, n))
				pr = append(pr, run(false, ka, n))
			}
		}
		pm, tm := median(pr), median(tp)
		t.Logf("%s, c=8: proxy CPU per request (median of 5): via HTTPS_PROXY %v, transparent %v, ratio %.2f× (rounds: %v / %v)",
			label, pm, tm, float64(tm)/float64(pm), pr, tp)
	}
}

// askDNS asks airlock's DNS inside the namespace for upstream.test, from a process there.
func askDNS(t *testing.T, nsenter, ns string) string {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 1, RecursionDesired: true})
	b.StartQuestions()
	b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("upstream.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q, _ := b.Finish()
	// python3 sends the query and prints the answer's last four bytes (the A record).
	out, err := exec.Command(nsenter, "--net="+ns, "python3", "-c", `
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
s.sendto(bytes.fromhex(sys.argv[1]), ("127.0.0.1", 53))
a = s.recv(512)[-4:]
print(".".join(str(x) for x in a))`, fmt.Sprintf("%x", q)).CombinedOutput()
	if err != nil {
		t.Fatalf("dns: %v\n%s", err, out)
	}
	ip := strings.TrimSpace(string(out))
	if !strings.HasPrefix(ip, "198.18.") {
		t.Fatalf("dns answer %q", ip)
	}
	return ip
}

// writePEM writes a leaf's chain and key as PEM files.
func writePEM(t *testing.T, c *tls.Certificate, certFile, keyFile string) {
	t.Helper()
	var certs []byte
	for _, der := range c.Certificate {
		certs = append(certs, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	key, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(certFile, certs, 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600)
}
