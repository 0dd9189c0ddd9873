package proxy

// The red team of upstreamTLS (2026-12-07), kept as tests: certificates for other names
// and address forms, invalid ones, untrusted and constrained CAs, downgrades, h2, a parent
// proxy and a certificate swapped after the direct path took over. Each must be refused
// by the direct path and the Transport alike (or, for the controls, accepted).

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

type rtCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var rtSerial atomic.Int64

func rtTemplate() *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: big.NewInt(rtSerial.Add(1) + 1000),
		Subject:      pkix.Name{CommonName: "rt"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
}

func rtNewCA(t *testing.T, mod func(*x509.Certificate)) *rtCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := rtTemplate()
	tmpl.Subject.CommonName = "rt CA"
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = nil
	if mod != nil {
		mod(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &rtCA{cert: c, key: key}
}

func (c *rtCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

// leaf issues a certificate from c; names are DNS names or IP literals; mod changes the
// template last. The chain served is leaf + chain... + CA.
func (c *rtCA) leaf(t *testing.T, mod func(*x509.Certificate), names ...string) (tls.Certificate, *x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := rtTemplate()
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	if mod != nil {
		mod(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	lc, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key, Leaf: lc}, lc, key
}

// rtTLSServer serves HTTP (h2 when http2) over TLS with cfg on network address listen.
func rtTLSServer(t *testing.T, listen string, cfg *tls.Config, http2 bool) (addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Skipf("listen %s: %v", listen, err)
	}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "IMPOSTOR proto=%s auth=%q", r.Proto, r.Header.Get("Authorization"))
	}))
	s.Listener.Close()
	s.Listener = ln
	s.TLS = cfg
	s.EnableHTTP2 = http2
	s.StartTLS()
	t.Cleanup(s.Close)
	return ln.Addr().String()
}

var rtGuard = &Guard{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}

// rtBoth fetches u through the direct path and through the Transport with ut and returns
// the Transport's response and both errors (nil: the upstream was accepted).
func rtBoth(t *testing.T, ut *upstreamTLS, u string) (trResp *http.Response, h1Err, trErr error) {
	t.Helper()
	h1 := &h1Transport{dial: rtGuard.DialContext, tls: ut, headerTimeout: 3 * time.Second}
	defer h1.CloseIdleConnections()
	req, _ := http.NewRequest("GET", u, nil)
	if resp, err := h1.RoundTrip(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	} else {
		h1Err = err
	}
	tr := newTransport(rtGuard, ut, Options{})
	defer tr.CloseIdleConnections()
	req, _ = http.NewRequest("GET", u, nil)
	resp, err := tr.RoundTrip(req)
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		trResp = resp
	}
	return trResp, h1Err, err
}

func rtExpect(t *testing.T, what string, ut *upstreamTLS, u string, accept bool) {
	t.Helper()
	_, h1Err, trErr := rtBoth(t, ut, u)
	if (h1Err == nil) != accept {
		t.Errorf("%s: direct path err=%v, want accepted=%v", what, h1Err, accept)
	}
	if (trErr == nil) != accept {
		t.Errorf("%s: Transport err=%v, want accepted=%v", what, trErr, accept)
	}
	if !accept && h1Err != nil {
		t.Logf("%s: refused: %v", what, h1Err)
	}
}

func rtServeCert(t *testing.T, listen string, cert tls.Certificate, mod func(*tls.Config)) string {
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	if mod != nil {
		mod(cfg)
	}
	return rtTLSServer(t, listen, cfg, false)
}

// Names vs IPs, both families, with the CA in the extra roots.
func TestRTNameBinding(t *testing.T) {
	c := rtNewCA(t, nil)
	ut := &upstreamTLS{extra: c.pool()}
	port := func(a string) string { _, p, _ := net.SplitHostPort(a); return p }
	cases := []struct {
		name   string
		listen string
		names  []string
		host   string // URL host (no port)
		mod    func(*x509.Certificate)
		accept bool
	}{
		{"v4 IP, cert for other name", "127.0.0.1:0", []string{"evil.example"}, "127.0.0.1", nil, false},
		{"v4 IP, cert CN=127.0.0.1 only, no SAN", "127.0.0.1:0", nil, "127.0.0.1", func(x *x509.Certificate) { x.Subject.CommonName = "127.0.0.1" }, false},
		{"v4 IP, IP written as DNS SAN string", "127.0.0.1:0", nil, "127.0.0.1", func(x *x509.Certificate) { x.DNSNames = []string{"127.0.0.1"} }, false},
		{"v4 IP, wildcard *.0.0.1 DNS SAN", "127.0.0.1:0", nil, "127.0.0.1", func(x *x509.Certificate) { x.DNSNames = []string{"*.0.0.1"} }, false},
		{"v4 IP, cert for 127.0.0.2", "127.0.0.1:0", []string{"127.0.0.2"}, "127.0.0.1", nil, false},
		{"v4 IP, cert for ::1", "127.0.0.1:0", []string{"::1"}, "127.0.0.1", nil, false},
		{"v4 IP, cert for right IP (control)", "127.0.0.1:0", []string{"127.0.0.1"}, "127.0.0.1", nil, true},
		{"v6 [::1], cert for 127.0.0.1", "[::1]:0", []string{"127.0.0.1"}, "[::1]", nil, false},
		{"v6 [::1], cert for localhost", "[::1]:0", []string{"localhost"}, "[::1]", nil, false},
		{"v6 [::1], DNS SAN '::1' string", "[::1]:0", nil, "[::1]", func(x *x509.Certificate) { x.DNSNames = []string{"::1"} }, false},
		{"v6 [::1], cert for ::1 (control)", "[::1]:0", []string{"::1"}, "[::1]", nil, true},
		{"v4-mapped [::ffff:127.0.0.1], cert for evil", "127.0.0.1:0", []string{"evil.example"}, "[::ffff:127.0.0.1]", nil, false},
		{"localhost, cert for 127.0.0.1 (IP SAN)", "127.0.0.1:0", []string{"127.0.0.1"}, "localhost", nil, false},
		{"localhost, cert wildcard *", "127.0.0.1:0", nil, "localhost", func(x *x509.Certificate) { x.DNSNames = []string{"*"} }, false},
		{"localhost, cert *.localhost", "127.0.0.1:0", []string{"*.localhost"}, "localhost", nil, false},
		{"localhost, cert localhost.evil", "127.0.0.1:0", []string{"localhost.evil"}, "localhost", nil, false},
		{"localhost, cert for xn-- lookalike", "127.0.0.1:0", []string{"xn--localhost-"}, "localhost", nil, false},
		{"localhost, cert LOCALHOST (case, control)", "127.0.0.1:0", nil, "localhost", func(x *x509.Certificate) { x.DNSNames = []string{"LOCALHOST"} }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.host == "localhost" || tc.host == "localhost." {
				if _, err := net.LookupHost("localhost"); err != nil {
					t.Skip("no localhost")
				}
			}
			cert, _, _ := c.leaf(t, tc.mod, tc.names...)
			addr := rtServeCert(t, tc.listen, cert, nil)
			rtExpect(t, tc.name, ut, "https://"+tc.host+":"+port(addr)+"/", tc.accept)
		})
	}
}

// Validity, EKU, chain structure and name constraints, with the CA in the extra roots.
func TestRTCertificateProperties(t *testing.T) {
	c := rtNewCA(t, nil)
	ut := &upstreamTLS{extra: c.pool()}
	now := time.Now()
	cases := []struct {
		name string
		mod  func(*x509.Certificate)
	}{
		{"expired", func(x *x509.Certificate) { x.NotBefore, x.NotAfter = now.Add(-48*time.Hour), now.Add(-24*time.Hour) }},
		{"not yet valid", func(x *x509.Certificate) { x.NotBefore, x.NotAfter = now.Add(24*time.Hour), now.Add(48*time.Hour) }},
		{"clientAuth-only EKU", func(x *x509.Certificate) { x.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth} }},
		{"codeSigning-only EKU", func(x *x509.Certificate) { x.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cert, _, _ := c.leaf(t, tc.mod, "127.0.0.1")
			addr := rtServeCert(t, "127.0.0.1:0", cert, nil)
			rtExpect(t, tc.name, ut, "https://"+addr+"/", false)
		})
	}

	// A leaf the attacker legitimately holds (for evil.example) used as an issuer for 127.0.0.1.
	t.Run("leaf signs leaf", func(t *testing.T) {
		_, evil, evilKey := c.leaf(t, nil, "evil.example")
		sub := &rtCA{cert: evil, key: evilKey}
		forged, _, _ := sub.leaf(t, nil, "127.0.0.1")
		forged.Certificate = [][]byte{forged.Certificate[0], evil.Raw, c.cert.Raw}
		addr := rtServeCert(t, "127.0.0.1:0", forged, nil)
		rtExpect(t, "leaf signs leaf", ut, "https://"+addr+"/", false)
	})

	// Intermediate under a name-constrained root (excluded 127.0.0.0/8, permitted DNS good.example).
	t.Run("name constraints", func(t *testing.T) {
		nc := rtNewCA(t, func(x *x509.Certificate) {
			x.PermittedDNSDomains = []string{"good.example"}
			x.ExcludedIPRanges = []*net.IPNet{{IP: net.IPv4(127, 0, 0, 0).To4(), Mask: net.CIDRMask(8, 32)}}
			x.PermittedDNSDomainsCritical = true
		})
		ut := &upstreamTLS{extra: nc.pool()}
		cert, _, _ := nc.leaf(t, nil, "127.0.0.1")
		addr := rtServeCert(t, "127.0.0.1:0", cert, nil)
		rtExpect(t, "excluded IP", ut, "https://"+addr+"/", false)
		cert, _, _ = nc.leaf(t, nil, "localhost")
		addr = rtServeCert(t, "127.0.0.1:0", cert, nil)
		_, p, _ := net.SplitHostPort(addr)
		rtExpect(t, "DNS outside permitted", ut, "https://localhost:"+p+"/", false)
		// Constraint on an intermediate.
		inter := &rtCA{}
		_, ic, ik := nc.leaf(t, func(x *x509.Certificate) {
			x.IsCA, x.BasicConstraintsValid = true, true
			x.KeyUsage = x509.KeyUsageCertSign
			x.ExtKeyUsage = nil
		}, "good.example")
		inter.cert, inter.key = ic, ik
		cert, _, _ = inter.leaf(t, nil, "127.0.0.1")
		cert.Certificate = [][]byte{cert.Certificate[0], ic.Raw}
		addr = rtServeCert(t, "127.0.0.1:0", cert, nil)
		rtExpect(t, "through constrained intermediate", ut, "https://"+addr+"/", false)
	})
}

// System roots only (no --upstream-ca): a private CA's certificate for the right IP/name must be refused;
// and extra roots of another CA do not accept it either.
func TestRTUntrustedCA(t *testing.T) {
	c := rtNewCA(t, nil)
	cert, _, _ := c.leaf(t, nil, "127.0.0.1", "localhost")
	addr := rtServeCert(t, "127.0.0.1:0", cert, nil)
	rtExpect(t, "system roots only", &upstreamTLS{}, "https://"+addr+"/", false)
	other := rtNewCA(t, nil)
	rtExpect(t, "another CA's extra roots", &upstreamTLS{extra: other.pool()}, "https://"+addr+"/", false)
	// Self-signed leaf that is in the extra roots itself, for another name.
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := rtTemplate()
	tmpl.DNSNames = []string{"evil.example"}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	ss, _ := x509.ParseCertificate(der)
	p := x509.NewCertPool()
	p.AddCert(ss)
	addr = rtServeCert(t, "127.0.0.1:0", tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil)
	rtExpect(t, "self-signed root for another name as leaf", &upstreamTLS{extra: p}, "https://"+addr+"/", false)
}

// TLS versions below 1.2 refused.
func TestRTVersionDowngrade(t *testing.T) {
	c := rtNewCA(t, nil)
	ut := &upstreamTLS{extra: c.pool()}
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		cert, _, _ := c.leaf(t, nil, "127.0.0.1")
		addr := rtServeCert(t, "127.0.0.1:0", cert, func(cfg *tls.Config) { cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS10, v })
		rtExpect(t, tls.VersionName(v), ut, "https://"+addr+"/", false)
	}
}

// h2 still negotiated through the Transport, resp.TLS set, for the verified name.
func TestRTH2StillNegotiated(t *testing.T) {
	c := rtNewCA(t, nil)
	ut := &upstreamTLS{extra: c.pool()}
	cert, _, _ := c.leaf(t, nil, "127.0.0.1")
	addr := rtTLSServer(t, "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}}, true)
	resp, _, trErr := rtBoth(t, ut, "https://"+addr+"/")
	if trErr != nil {
		t.Fatal(trErr)
	}
	if resp.ProtoMajor != 2 {
		t.Errorf("Transport spoke %s to an h2 upstream, want HTTP/2", resp.Proto)
	}
	if resp.TLS == nil {
		t.Fatal("resp.TLS nil")
	}
	if resp.TLS.NegotiatedProtocol != "h2" || len(resp.TLS.PeerCertificates) == 0 {
		t.Errorf("TLS state %q peers=%d", resp.TLS.NegotiatedProtocol, len(resp.TLS.PeerCertificates))
	}
	// And an h2 upstream with a cert for another name is refused before any h2 frame.
	bad, _, _ := c.leaf(t, nil, "evil.example")
	addr = rtTLSServer(t, "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{bad}}, true)
	if _, _, err := rtBoth(t, ut, "https://"+addr+"/"); err == nil {
		t.Error("h2 upstream with wrong-name cert accepted by the Transport")
	}
}

const rtAnyPolicy = `package airlock

decision := {"action": "allow", "rule": "rt.any"}
`

// Through the proxy (MITM): IPv6 literal and IPv4-mapped forms of an upstream with a
// trusted certificate for another name; the credential-injecting path must not reach it.
func TestRTInterceptedIPv6AndMapped(t *testing.T) {
	c := rtNewCA(t, nil)
	for _, tc := range []struct{ listen, urlHost string }{
		{"[::1]:0", "[::1]"},
		{"127.0.0.1:0", "[::ffff:127.0.0.1]"},
		{"127.0.0.1:0", "[0:0:0:0:0:ffff:7f00:1]"},
		{"127.0.0.1:0", "2130706433"},
		{"127.0.0.1:0", "0x7f.1"},
	} {
		cert, _, _ := c.leaf(t, nil, "evil.example")
		addr := rtServeCert(t, tc.listen, cert, nil)
		_, p, _ := net.SplitHostPort(addr)
		e := newEnv(t, func(o *Options) {
			o.UpstreamCAs = c.pool()
			o.Decider = e2etest.Engine(t, rtAnyPolicy)
			o.AllowPrivate = append(o.AllowPrivate, netip.MustParsePrefix("::1/128"))
		})
		cl := e.client(nil)
		cl.Transport.(*http.Transport).TLSClientConfig.InsecureSkipVerify = true // the sandbox's own check is not under test
		for i := range 3 {
			req, _ := http.NewRequest("GET", "https://"+tc.urlHost+":"+p+"/x", nil)
			resp, err := cl.Do(req)
			if err != nil {
				t.Logf("%s read %d: client error %v", tc.urlHost, i, err)
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(b), "IMPOSTOR") {
				t.Errorf("%s read %d: impostor with cert for evil.example answered: %d %q", tc.urlHost, i, resp.StatusCode, b)
			} else {
				t.Logf("%s read %d: %d %.100q", tc.urlHost, i, resp.StatusCode, b)
			}
		}
	}
}

// Parent proxy: the parent (at 127.0.0.1) connects every CONNECT to an impostor whose
// certificate is valid for the parent's own name/IP or for another host, never for the
// target. The certificate must be checked for the target, not the parent.
func TestRTParentProxyVerifiesTarget(t *testing.T) {
	c := rtNewCA(t, nil)
	for _, tc := range []struct {
		names  []string
		accept bool
	}{{[]string{"parent.example"}, false}, {[]string{"127.0.0.1"}, false}, {[]string{"evil.example"}, false}, {[]string{"target.example"}, true}} {
		cert, _, _ := c.leaf(t, nil, tc.names...)
		impostor := rtServeCert(t, "127.0.0.1:0", cert, nil)
		var connects atomic.Int32
		parent := newRawUpstream(t, func(_ int, cc net.Conn, br *bufio.Reader) {
			req, err := http.ReadRequest(br)
			if err != nil || req.Method != "CONNECT" {
				return
			}
			connects.Add(1)
			up, err := net.Dial("tcp", impostor)
			if err != nil {
				return
			}
			defer up.Close()
			io.WriteString(cc, "HTTP/1.1 200 OK\r\n\r\n")
			go io.Copy(up, br)
			io.Copy(cc, up)
		})
		pu, _ := url.Parse("http://" + parent.ln.Addr().String())
		e := newEnv(t, func(o *Options) {
			o.UpstreamCAs = c.pool()
			o.Parent = ParentProxy{URL: pu}
			o.Decider = e2etest.Engine(t, rtAnyPolicy)
			o.Resolver = staticResolver{netip.MustParseAddr("127.0.0.1")}
		})
		cl := e.client(nil)
		// The target: some other local port (what is there does not matter; the parent picks).
		target := "target.example:9" // resolved by airlock to 127.0.0.1 (checked), then sent to the parent
		for i := range 2 {
			resp, body := get(t, cl, "GET", "https://"+target+"/x", "")
			got := strings.Contains(body, "IMPOSTOR")
			if got != tc.accept {
				t.Errorf("cert %v via parent, read %d: %d %q; want impostor reached=%v", tc.names, i, resp.StatusCode, body, tc.accept)
			} else {
				t.Logf("cert %v via parent, read %d: %d %.80q", tc.names, i, resp.StatusCode, body)
			}
		}
		if connects.Load() == 0 {
			t.Errorf("the parent saw no CONNECT")
		}
	}
}

// Direct path after learning: upstream answers HTTP/1.1 with a good cert first (the
// Transport learns h1-only), then the same address presents a cert for another name on
// every later connection, which the direct path now makes.
func TestRTDirectPathAfterLearningSwitchesCert(t *testing.T) {
	c := rtNewCA(t, nil)
	good, _, _ := c.leaf(t, nil, "127.0.0.1")
	bad, _, _ := c.leaf(t, nil, "evil.example")
	u := newRawUpstream(t, func(i int, raw net.Conn, _ *bufio.Reader) {
		cert, which := good, "good"
		if i > 0 {
			cert, which = bad, "BAD"
		}
		tc := tls.Server(raw, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
		if tc.Handshake() != nil {
			return
		}
		br := bufio.NewReader(tc)
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body := fmt.Sprintf("conn %d cert=%s auth=%q", i, which, r.Header.Get("Authorization"))
			fmt.Fprintf(tc, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
	})
	e := newEnv(t, func(o *Options) { o.UpstreamCAs = c.pool() })
	for i := range 4 {
		cl := e.client(nil)
		resp, body := get(t, cl, "GET", "https://"+u.ln.Addr().String()+"/allowed/x", "")
		if i == 0 && (resp.StatusCode != 200 || !e.proxy.h1.speaksH1(mustReq(t, "https://"+u.ln.Addr().String()+"/"))) {
			t.Fatalf("read 0: %d %q, and the upstream must now be one the direct path takes", resp.StatusCode, body)
		}
		if strings.Contains(body, "cert=BAD") {
			t.Errorf("read %d: answered over a connection with the evil.example cert: %q", i, body)
		}
		e.proxy.h1.CloseIdleConnections()
		e.proxy.tr.CloseIdleConnections()
	}
}

func mustReq(t *testing.T, u string) *http.Request {
	r, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A refused certificate says why (here: not for a server) rather than "unknown
// authority" from the system roots, which it was never meant to chain to (red team: the
// first pool's error was said, the system roots', hiding the reason in 502 bodies).
func TestUpstreamTLSSaysWhyAnExtraRootsCertificateIsRefused(t *testing.T) {
	c := rtNewCA(t, nil)
	ut := &upstreamTLS{extra: c.pool()}
	cert, _, _ := c.leaf(t, func(x *x509.Certificate) { x.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth} }, "127.0.0.1")
	addr := rtServeCert(t, "127.0.0.1:0", cert, nil)
	_, h1Err, trErr := rtBoth(t, ut, "https://"+addr+"/")
	for what, err := range map[string]error{"direct path": h1Err, "Transport": trErr} {
		var invalid x509.CertificateInvalidError
		if !errors.As(err, &invalid) || invalid.Reason != x509.IncompatibleUsage {
			t.Errorf("%s: a client-only certificate from the extra roots refused with %v, want its usage said", what, err)
		}
	}
}
