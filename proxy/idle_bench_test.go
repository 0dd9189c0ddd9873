package proxy

import (
	"bufio"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"

	"github.com/elazarl/goproxy"

	"github.com/airlock-proxy/airlock/ca"
)

// BenchmarkIdleConnStack reports the goroutine stack memory one idle keep-alive connection
// keeps after its one request (stack-B/conn; heap-B/conn beside it, and the goroutines left
// with 500 connections open), through plain goproxy and through airlock
// with the audit log and OTel on: a connection's goroutine keeps the stack its request
// grew, so the request path's deepest frames set what 10,000 idle connections cost
// (docs/performance.md). The clients are raw connections, so only the proxies' stacks
// are counted. Stack sizes are powers of two: the figure moves in steps, not noise.
func BenchmarkIdleConnStack(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) }))
	defer up.Close()
	port := mustURL(up.URL).Port()
	eng := benchEngine(b)
	c, _ := ca.New()
	full := benchFullProxy(b, eng, c, x509.NewCertPool())
	gp := goproxy.NewProxyHttpServer()
	gpSrv := httptest.NewServer(gp)
	defer gpSrv.Close()
	const conns = 500
	measure := func(b *testing.B, addr, target string) {
		for b.Loop() {
			var held []net.Conn
			runtime.GC()
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			for range conns {
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				held = append(held, conn)
				fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, mustURL(target).Host)
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil || resp.StatusCode != 200 {
					b.Fatalf("response %v, %v", resp, err)
				}
				resp.Body.Close()
			}
			runtime.GC()
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.StackInuse-before.StackInuse)/conns, "stack-B/conn")
			b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/conns, "heap-B/conn")
			b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
			for _, conn := range held {
				conn.Close()
			}
		}
	}
	b.Run("goproxy", func(b *testing.B) { measure(b, gpSrv.Listener.Addr().String(), up.URL+"/simple/") })
	b.Run("airlock-http-audit-otel", func(b *testing.B) {
		measure(b, full.Addr().String(), "http://pypi.org:"+port+"/simple/")
	})
}
