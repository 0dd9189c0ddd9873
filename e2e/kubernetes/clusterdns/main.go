// Command clusterdns is the e2e cluster's DNS: it answers A queries for
// SERVICE.NAMESPACE.svc.DOMAIN with the Service's cluster IP (as CoreDNS's kubernetes plugin
// does for ClusterIP Services), NXDOMAIN for other names under DOMAIN, and REFUSED for
// anything else (the cluster has no way out by name). It serves UDP and TCP on one
// address, which the kubelet hands to pods as their nameserver.
//
//	clusterdns -listen 192.0.2.2:53 -kubeconfig admin.kubeconfig [-domain cluster.local]
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"io"
	"log"
	"net"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	listen := flag.String("listen", "", "address to serve on (UDP and TCP)")
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	domain := flag.String("domain", "cluster.local", "the cluster's domain")
	flag.Parse()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Fatal(err)
	}
	s := &server{cs: cs, suffix: ".svc." + strings.Trim(*domain, ".") + "."}
	pc, err := net.ListenPacket("udp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	go s.serveTCP(ln)
	buf := make([]byte, 1500)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			log.Fatal(err)
		}
		if out := s.answer(buf[:n]); out != nil {
			_, _ = pc.WriteTo(out, addr)
		}
	}
}

type server struct {
	cs     kubernetes.Interface
	suffix string // ".svc.cluster.local."
}

func (s *server) serveTCP(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			var l [2]byte
			if _, err := io.ReadFull(c, l[:]); err != nil {
				return
			}
			q := make([]byte, binary.BigEndian.Uint16(l[:]))
			if _, err := io.ReadFull(c, q); err != nil {
				return
			}
			if out := s.answer(q); out != nil {
				_, _ = c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...))
			}
		}()
	}
}

func (s *server) answer(q []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil
	}
	question := qs[0]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	name := strings.ToLower(question.Name.String())
	var ip netip.Addr
	switch {
	case question.Class != dnsmessage.ClassINET:
		rh.RCode = dnsmessage.RCodeRefused
	case !strings.HasSuffix(name, s.suffix):
		rh.RCode = dnsmessage.RCodeRefused
	default:
		svc, ns, ok := strings.Cut(strings.TrimSuffix(name, s.suffix), ".")
		if !ok || strings.Contains(ns, ".") {
			rh.RCode = dnsmessage.RCodeNameError
			break
		}
		ip, err = s.lookup(svc, ns)
		switch {
		case errors.Is(err, errNotFound):
			rh.RCode = dnsmessage.RCodeNameError
		case err != nil:
			log.Printf("%s: %v", name, err)
			rh.RCode = dnsmessage.RCodeServerFailure
		}
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	_ = b.StartQuestions()
	_ = b.Question(question)
	_ = b.StartAnswers()
	if ip.Is4() && question.Type == dnsmessage.TypeA {
		_ = b.AResource(dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 5},
			dnsmessage.AResource{A: ip.As4()})
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

var errNotFound = errors.New("not found")

func (s *server) lookup(svc, ns string) (netip.Addr, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	o, err := s.cs.CoreV1().Services(ns).Get(ctx, svc, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return netip.Addr{}, errNotFound
	}
	if err != nil {
		return netip.Addr{}, err
	}
	ip, err := netip.ParseAddr(o.Spec.ClusterIP)
	if err != nil {
		return netip.Addr{}, errNotFound // headless: not served here
	}
	return ip, nil
}
