package proxy

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"sync"

	"golang.org/x/net/dns/dnsmessage"
)

// The DNS a sandbox with transparent egress sees. Every name gets an answer from
// fakeRange (198.18.0.0/15, reserved for benchmarking, never a real destination) that
// maps back to the name for as long as the sandbox lives; no query leaves airlock, so
// a name can carry nothing out. Whether the name may be reached is decided when the
// sandbox connects, where the port is known.

// fakeRange holds the addresses airlock's DNS gives out.
var fakeRange = netip.MustParsePrefix("198.18.0.0/15")

// fakeTTL is the TTL of every answer: the mapping outlives it.
const fakeTTL = 300

// fakeNames maps names to addresses of fakeRange and back, for one sandbox. When the
// range is used up the oldest mapping is reused.
type fakeNames struct {
	mu     sync.Mutex
	byName map[string]netip.Addr
	byAddr map[netip.Addr]string
	next   uint32 // offset of the next address in fakeRange
}

func newFakeNames() *fakeNames {
	return &fakeNames{byName: map[string]netip.Addr{}, byAddr: map[netip.Addr]string{}, next: 1}
}

// fakeSize is the number of addresses in fakeRange.
const fakeSize = 1 << (32 - 15)

// addr returns the address for name, giving one out if needed.
func (f *fakeNames) addr(name string) netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a, ok := f.byName[name]; ok {
		return a
	}
	base := fakeRange.Addr().As4()
	v := binary.BigEndian.Uint32(base[:]) + f.next
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	a := netip.AddrFrom4(b)
	f.next++
	if f.next >= fakeSize-1 { // skip the range's first and last address
		f.next = 1
	}
	if old, ok := f.byAddr[a]; ok {
		delete(f.byName, old)
	}
	f.byName[name] = a
	f.byAddr[a] = name
	return a
}

// name returns the name a given-out address stands for.
func (f *fakeNames) name(a netip.Addr) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.byAddr[a]
	return n, ok
}

// serveDNS answers queries on pc until it is closed.
func serveDNS(pc net.PacketConn, names *fakeNames) {
	buf := make([]byte, 4096)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return
		}
		if resp := answerDNSSafely(buf[:n], names); resp != nil {
			_, _ = pc.WriteTo(resp, from)
		}
	}
}

// answerDNSSafely is answerDNS, a query it panics on left unanswered: a sandbox's packet
// must not end the process (this runs in a goroutine nothing else recovers).
func answerDNSSafely(query []byte, names *fakeNames) (resp []byte) {
	defer func() {
		if recover() != nil {
			resp = nil
		}
	}()
	return answerDNS(query, names)
}

// answerDNS builds the answer to one query: an A record from fakeRange for any name (and
// the loopback address for localhost), no AAAA records (clients then use the A record),
// the name for a PTR of a given-out address, and an empty answer for every other type.
// Malformed queries get FORMERR, or no answer when not even the header parses.
func answerDNS(query []byte, names *fakeNames) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil || h.Response {
		return nil
	}
	rh := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, Authoritative: true,
		RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	q, err := p.Question()
	if err != nil || h.OpCode != 0 {
		rh.RCode = dnsmessage.RCodeFormatError
		if h.OpCode != 0 {
			rh.RCode = dnsmessage.RCodeNotImplemented
		}
		b := dnsmessage.NewBuilder(nil, rh)
		out, _ := b.Finish()
		return out
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil
	}
	if err := b.Question(q); err != nil {
		return nil
	}
	if err := b.StartAnswers(); err != nil {
		return nil
	}
	name := strings.TrimSuffix(strings.ToLower(q.Name.String()), ".")
	rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: fakeTTL}
	if q.Class == dnsmessage.ClassINET {
		switch q.Type {
		case dnsmessage.TypeA:
			a := netip.MustParseAddr("127.0.0.1")
			if name != "localhost" && !strings.HasSuffix(name, ".localhost") {
				a = names.addr(name)
			}
			if err := b.AResource(rr, dnsmessage.AResource{A: a.As4()}); err != nil {
				return nil
			}
		case dnsmessage.TypeAAAA:
			if name == "localhost" || strings.HasSuffix(name, ".localhost") {
				if err := b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: netip.IPv6Loopback().As16()}); err != nil {
					return nil
				}
			}
		case dnsmessage.TypePTR:
			if a, ok := ptrAddr(name); ok {
				if n, ok := names.name(a); ok {
					target, err := dnsmessage.NewName(n + ".")
					if err == nil {
						if err := b.PTRResource(rr, dnsmessage.PTRResource{PTR: target}); err != nil {
							return nil
						}
					}
				}
			}
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// ptrAddr parses d.c.b.a.in-addr.arpa.
func ptrAddr(name string) (netip.Addr, bool) {
	rest, ok := strings.CutSuffix(name, ".in-addr.arpa")
	if !ok {
		return netip.Addr{}, false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 4 {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(parts[3] + "." + parts[2] + "." + parts[1] + "." + parts[0])
	return a, err == nil
}
