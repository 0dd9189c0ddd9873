//go:build e2e

// Package transparent_test measures what transparent egress costs against HTTP_PROXY:
// the same HTTPS request, intercepted by the same proxy, from a client that either names
// the proxy (CONNECT) or dials the destination inside a network namespace whose TCP is
// redirected to airlock (transparent). Run as root:
//
//	go test -tags e2e -count=1 -v -run TestTransparentCost ./bench/transparent/
package transparent_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"

	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/internal/e2etest"
	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/sandbox"
)

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

// inNetns runs fn on a thread inside the namespace at path (sockets made there stay there).
func inNetns(path string, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, _ := os.Open("/proc/thread-self/ns/net")
		defer orig.Close()
		ns, err := os.Open(path)
		if err != nil {
			done <- err
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- err
			return // thread stays locked and dies
		}
		runtime.UnlockOSThread()
		done <- ferr
	}()
	return <-done
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
	ctx := context.Background()
	upCA, _ := ca.New()
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "0123456789abcdefghij")
	}))
	up.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return upCA.Leaf(h.ServerName) }}
	up.StartTLS()
	t.Cleanup(up.Close)
	upURL, _ := url.Parse(up.URL)
	target := "https://upstream.test:" + upURL.Port() + "/small"

	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "p.rego"), []byte(`package airlock
decision := {"action": "allow", "rule": "bench"}
`), 0o600)
	eng, err := rego.New(ctx, rego.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	aca, _ := ca.New()
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
	for _, pl := range l.Proxy {
		defer p.Attach(pl, identity.Identity{ID: "bench"})()
	}
	defer p.AttachTransparent(l.Transparent, l.DNS, identity.Identity{ID: "bench"})()

	// The name, asked of airlock's DNS inside the namespace.
	var fake netip.Addr
	err = inNetns(ns, func() error {
		c, err := net.Dial("udp", "127.0.0.1:53")
		if err != nil {
			return err
		}
		defer c.Close()
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 1, RecursionDesired: true})
		b.StartQuestions()
		b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("upstream.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
		q, _ := b.Finish()
		c.Write(q)
		buf := make([]byte, 512)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		var m dnsmessage.Message
		if err := m.Unpack(buf[:n]); err != nil || len(m.Answers) == 0 {
			return fmt.Errorf("dns answer: %v", err)
		}
		fake = netip.AddrFrom4(m.Answers[0].Body.(*dnsmessage.AResource).A)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	pool := x509.NewCertPool()
	pool.AddCert(aca.Certificate())
	pool.AddCert(upCA.Certificate())
	tlsCfg := &tls.Config{RootCAs: pool}
	direct := func() *http.Transport {
		return &http.Transport{TLSClientConfig: tlsCfg, MaxIdleConnsPerHost: 64,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp", up.Listener.Addr().String())
			}}
	}
	proxied := func() *http.Transport {
		pu, _ := url.Parse("http://" + ln.Addr().String())
		return &http.Transport{TLSClientConfig: tlsCfg, MaxIdleConnsPerHost: 64, Proxy: http.ProxyURL(pu)}
	}
	transparent := func() *http.Transport {
		return &http.Transport{TLSClientConfig: tlsCfg, MaxIdleConnsPerHost: 64,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var c net.Conn
				err := inNetns(ns, func() error {
					var err error
					c, err = net.Dial("tcp", netip.AddrPortFrom(fake, uint16(mustPort(upURL.Port()))).String())
					return err
				})
				return c, err
			}}
	}
	const conc = 8
	measure := func(name string, mk func() *http.Transport, keepAlive bool, n int) time.Duration {
		tr := mk()
		defer tr.CloseIdleConnections()
		if !keepAlive {
			tr.DisableKeepAlives = true
		}
		c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
		get := func() {
			resp, err := c.Get(target)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%s: status %d", name, resp.StatusCode)
			}
		}
		for i := 0; i < conc; i++ { // warm: connections, leaf certificates, policy cache
			get()
		}
		runtime.GC()
		start := cpuNow()
		var wg sync.WaitGroup
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
		return (cpuNow() - start) / time.Duration(n)
	}
	// Rounds alternate the order, and the median of each is reported: the machine is shared.
	median := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	for _, ka := range []bool{true, false} {
		n := 3000
		label := "keep-alive"
		if !ka {
			n, label = 400, "new connection per request"
		}
		var d, pr, tp []time.Duration
		for round := 0; round < 3; round++ {
			d = append(d, measure("direct", direct, ka, n))
			if round%2 == 0 {
				pr = append(pr, measure("HTTPS_PROXY", proxied, ka, n))
				tp = append(tp, measure("transparent", transparent, ka, n))
			} else {
				tp = append(tp, measure("transparent", transparent, ka, n))
				pr = append(pr, measure("HTTPS_PROXY", proxied, ka, n))
			}
		}
		dm, pm, tm := median(d), median(pr), median(tp)
		t.Logf("%s, c=%d: process CPU per request (median of 3): direct %v, via HTTPS_PROXY %v, transparent %v", label, conc, dm, pm, tm)
		t.Logf("%s: proxy's share (minus direct): HTTPS_PROXY %v, transparent %v, ratio %.2f×", label, pm-dm, tm-dm, float64(tm-dm)/float64(pm-dm))
	}
}

func mustPort(s string) int {
	var n int
	fmt.Sscanf(s, "%d", &n)
	return n
}
