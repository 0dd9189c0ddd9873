// Command goproxy-baseline is airlock-bench's baseline: a bare goproxy with a tuned
// transport (a large idle pool per host) that intercepts CONNECT with leaf certificates from
// the ca package, cached per host, as airlock does. No policy, no credentials, no audit. It
// imports nothing of airlock but ca, so its memory is goproxy's own.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/airlock-proxy/airlock/ca"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "goproxy-baseline:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("goproxy-baseline", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "listen address")
	caDir := fs.String("ca-dir", "", "directory of the interception CA (created if missing)")
	upCA := fs.String("upstream-ca", "", "PEM file of CAs trusted for upstream servers")
	pprofAddr := fs.String("pprof", "", "serve net/http/pprof on this loopback address (for airlock-bench's memory figures)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, _, err := ca.Init(*caDir)
	if err != nil {
		return err
	}
	pem, err := os.ReadFile(*upCA)
	if err != nil {
		return fmt.Errorf("upstream CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return fmt.Errorf("upstream CA %s: no PEM certificate", *upCA)
	}
	gp := goproxy.NewProxyHttpServer()
	gp.Tr = &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		TLSClientConfig:     &tls.Config{RootCAs: roots},
	}
	mitm := &goproxy.ConnectAction{Action: goproxy.ConnectMitm, TLSConfig: func(host string, _ *goproxy.ProxyCtx) (*tls.Config, error) {
		h, _, err := net.SplitHostPort(host)
		if err != nil {
			h = host
		}
		leaf, err := c.Leaf(h)
		if err != nil {
			return nil, err
		}
		return &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"}}, nil
	}}
	gp.OnRequest().HandleConnectFunc(func(host string, _ *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		return mitm, host
	})
	if *pprofAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		go func() { _ = http.ListenAndServe(*pprofAddr, mux) }()
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: gp, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 5 * time.Minute}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
