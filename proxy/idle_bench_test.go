package proxy

import (
	"bufio"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/elazarl/goproxy"

	"github.com/airlock-proxy/airlock/ca"
)

// idleMem is what connections left idle after one request each keep in a proxy running in
// this process, per connection.
type idleMem struct {
	stackNoGC float64 // goroutine stack in use before a GC: what the request path grew
	stack     float64 // the same after a GC, which shrinks stacks that are mostly unused
	heap      float64
}

// measureIdle opens conns raw connections to the proxy at addr, sends one GET for target on
// each and reads its answer, and measures the stack and heap they keep while held open.
// The clients are raw connections, so only the proxy's goroutines are counted.
func measureIdle(tb testing.TB, addr, target string, conns int) idleMem {
	var held []net.Conn
	defer func() {
		for _, conn := range held {
			conn.Close()
		}
	}()
	runtime.GC()
	// No GC while the connections are opened: one would shrink the stacks grown so far,
	// and the figure would depend on when it ran.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for range conns {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			tb.Fatal(err)
		}
		held = append(held, conn)
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, mustURL(target).Host)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != 200 {
			tb.Fatalf("response %v, %v", resp, err)
		}
		resp.Body.Close()
	}
	// Before a GC: stacks grown by the request path stay that size until a GC shrinks
	// them, and an idle proxy may not collect for minutes.
	var grown runtime.MemStats
	runtime.ReadMemStats(&grown)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(conns) }
	return idleMem{stackNoGC: per(grown.StackInuse, before.StackInuse), stack: per(after.StackInuse, before.StackInuse),
		heap: per(after.HeapInuse, before.HeapInuse)}
}

// BenchmarkIdleConnStack reports the goroutine stack memory one idle keep-alive connection
// keeps after its one request (stack-nogc-B/conn before a GC, stack-B/conn after one;
// heap-B/conn beside them, and the goroutines left with 500 connections open), through
// plain goproxy and through airlock with the audit log and OTel on, without and with a
// credential: a connection's goroutine keeps the stack its request grew, so the request
// path's deepest frames set what 10,000 idle connections cost (docs/performance.md).
// Stack sizes are powers of two: the figure moves in steps, not noise.
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
			m := measureIdle(b, addr, target, conns)
			b.ReportMetric(m.stackNoGC, "stack-nogc-B/conn")
			b.ReportMetric(m.stack, "stack-B/conn")
			b.ReportMetric(m.heap, "heap-B/conn")
			b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines")
		}
	}
	b.Run("goproxy", func(b *testing.B) { measure(b, gpSrv.Listener.Addr().String(), up.URL+"/simple/") })
	b.Run("airlock-http-audit-otel", func(b *testing.B) {
		measure(b, full.Addr().String(), "http://pypi.org:"+port+"/simple/")
	})
	b.Run("airlock-credential", func(b *testing.B) {
		measure(b, full.Addr().String(), "http://cred.example:"+port+"/simple/")
	})
}
