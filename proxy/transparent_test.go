package proxy

import (
	"crypto/tls"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlock-proxy/airlock/ca"
)

func query(t *testing.T, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	b.StartQuestions()
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	q, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func answers(t *testing.T, resp []byte) (dnsmessage.Header, []dnsmessage.Resource) {
	t.Helper()
	var m dnsmessage.Message
	if err := m.Unpack(resp); err != nil {
		t.Fatalf("unpack answer: %v", err)
	}
	return m.Header, m.Answers
}

func TestDNSAnswersFromReservedRangeAndMapsBack(t *testing.T) {
	names := newFakeNames()
	h, as := answers(t, answerDNS(query(t, "API.Example.com.", dnsmessage.TypeA), names))
	if h.ID != 7 || !h.Response || h.RCode != dnsmessage.RCodeSuccess || len(as) != 1 {
		t.Fatalf("header %+v, %d answers", h, len(as))
	}
	a := netip.AddrFrom4(as[0].Body.(*dnsmessage.AResource).A)
	if !fakeRange.Contains(a) {
		t.Fatalf("answer %s outside %s", a, fakeRange)
	}
	if n, ok := names.name(a); !ok || n != "api.example.com" {
		t.Fatalf("address maps back to %q, %v", n, ok)
	}
	// The same name keeps its address; another name gets another.
	_, again := answers(t, answerDNS(query(t, "api.example.com.", dnsmessage.TypeA), names))
	if netip.AddrFrom4(again[0].Body.(*dnsmessage.AResource).A) != a {
		t.Error("the same name got a new address")
	}
	_, other := answers(t, answerDNS(query(t, "exfil-payload.evil.test.", dnsmessage.TypeA), names))
	if b := netip.AddrFrom4(other[0].Body.(*dnsmessage.AResource).A); b == a || !fakeRange.Contains(b) {
		t.Errorf("another name got %s", b)
	}
	// No AAAA (clients use the A record); other types answered empty, never refused.
	for _, typ := range []dnsmessage.Type{dnsmessage.TypeAAAA, dnsmessage.TypeTXT, dnsmessage.TypeMX} {
		h, as := answers(t, answerDNS(query(t, "api.example.com.", typ), names))
		if h.RCode != dnsmessage.RCodeSuccess || len(as) != 0 {
			t.Errorf("type %v: rcode %v, %d answers", typ, h.RCode, len(as))
		}
	}
	_, lo := answers(t, answerDNS(query(t, "localhost.", dnsmessage.TypeA), names))
	if netip.AddrFrom4(lo[0].Body.(*dnsmessage.AResource).A) != netip.MustParseAddr("127.0.0.1") {
		t.Error("localhost is not loopback")
	}
	if answerDNS([]byte{1, 2, 3}, names) != nil {
		t.Error("a truncated header got an answer")
	}
}

func TestFakeNamesReuseOldestWhenFull(t *testing.T) {
	f := newFakeNames()
	first := f.addr("first.test")
	for i := 0; i < fakeSize-3; i++ {
		f.addr("n" + string(rune('a'+i%26)) + netip.AddrFrom4([4]byte{byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)}).String())
	}
	if n, ok := f.name(first); !ok || n != "first.test" {
		t.Fatalf("first mapping lost before the range was used up: %q %v", n, ok)
	}
	f.addr("one-more.test")
	f.addr("and-another.test")
	if n, _ := f.name(first); n == "first.test" {
		t.Error("the oldest mapping was not reused once the range was used up")
	}
	if len(f.byName) != len(f.byAddr) || len(f.byName) > fakeSize {
		t.Errorf("maps out of step: %d names, %d addresses", len(f.byName), len(f.byAddr))
	}
}

func TestKindOf(t *testing.T) {
	for in, want := range map[string]connKind{
		"\x16\x03\x01":        kindTLS,
		"GET / HTTP/1.1\r\n":  kindHTTP,
		"PROPFIND /x":         kindHTTP,
		"GE":                  kindUnknown,
		"":                    kindUnknown,
		"SSH-2.0-OpenSSH_9.2": kindOther,
		"\x00\x00\x00\x08":    kindOther,
		" GET":                kindOther,
	} {
		if got := kindOf([]byte(in)); got != want {
			t.Errorf("kindOf(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestClientHelloSNI(t *testing.T) {
	c, s := net.Pipe()
	go func() {
		tls.Client(c, &tls.Config{ServerName: "sni.example.test", InsecureSkipVerify: true}).Handshake()
	}()
	buf := make([]byte, 0, 4096)
	for {
		b := make([]byte, 4096)
		n, err := s.Read(b)
		buf = append(buf, b[:n]...)
		if name, complete := clientHelloSNI(buf); complete {
			if name != "sni.example.test" {
				t.Errorf("SNI %q", name)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	c.Close()
	if _, complete := clientHelloSNI(buf[:10]); complete {
		t.Error("a partial hello reported complete")
	}
}

func TestParentFor(t *testing.T) {
	u, err := ParseParentURL("proxy.corp:8080")
	if err != nil {
		t.Fatal(err)
	}
	pp := &ParentProxy{URL: u, NoProxy: "internal.corp,10.0.0.0/8"}
	if got := pp.parentFor("api.github.com:443"); got == nil || got.Host != "proxy.corp:8080" {
		t.Errorf("api.github.com: %v", got)
	}
	for _, direct := range []string{"git.internal.corp:22", "10.1.2.3:5432"} {
		if got := pp.parentFor(direct); got != nil {
			t.Errorf("%s went to the parent despite NO_PROXY", direct)
		}
	}
	for _, bad := range []string{"https://proxy.corp:443", "socks5://p:1080", "http://p:1/path"} {
		if _, err := ParseParentURL(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if (*ParentProxy)(nil).parentFor("x:1") != nil {
		t.Error("no parent configured, yet one was used")
	}
}

// TestParentIsNeverADestination: the parent proxy carries airlock's own connections; a
// sandbox may not dial it as a destination, even where the policy and allow_private would let
// it (found by an attack: a tunnel decision let a sandbox speak CONNECT to the parent).
func TestParentIsNeverADestination(t *testing.T) {
	u, err := ParseParentURL("http://127.0.0.1:3999")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := ca.New()
	p, err := New(Options{Decider: failingDecider{}, CA: c, Parent: ParentProxy{URL: u},
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	if why := p.guard.Check(netip.MustParseAddr("127.0.0.1"), 3999); why != "the proxy itself" {
		t.Errorf("the parent proxy's address may be dialled as a destination (%q)", why)
	}
	if why := p.guard.Check(netip.MustParseAddr("127.0.0.1"), 4000); why != "" {
		t.Errorf("another allowed port is refused: %q", why)
	}
}
