package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Load is one closed-loop measurement: Concurrency goroutines each send a request, read
// the whole response, and send the next, over keep-alive connections, for Duration after
// an unmeasured Warmup.
type Load struct {
	URL         string
	Proxy       string // host:port of an HTTP proxy; "" goes direct
	RootCAs     *x509.CertPool
	Concurrency int
	Warmup      time.Duration
	Duration    time.Duration
	// BodyBytes, if positive, is the body length every response must have.
	BodyBytes int64
	// Request, if set, is POSTed as application/json with every request (otherwise GET).
	Request string
}

// LoadResult is what one Load measured.
type LoadResult struct {
	Requests uint64
	Errors   uint64
	FirstErr error
	Elapsed  time.Duration
	Hist     Histogram
}

// RPS is completed requests per second.
func (r *LoadResult) RPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// NewClient returns an HTTP/1.1 client with a keep-alive pool large enough for c
// connections, through proxy when it is not "".
func NewClient(proxy string, roots *x509.CertPool, c int) *http.Client {
	tr := &http.Transport{
		MaxIdleConns:        c * 2,
		MaxIdleConnsPerHost: c * 2,
		MaxConnsPerHost:     c,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: -1}).DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: roots},
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	if proxy != "" {
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: proxy})
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// Run measures. onStart and onStop, if set, are called as the measured window opens and
// closes (to read the proxy's CPU time, start a profile).
func (l Load) Run(ctx context.Context, onStart, onStop func()) (*LoadResult, error) {
	if l.Concurrency < 1 {
		return nil, fmt.Errorf("load: concurrency %d: want at least 1", l.Concurrency)
	}
	client := NewClient(l.Proxy, l.RootCAs, l.Concurrency)
	defer client.CloseIdleConnections()
	method := http.MethodGet
	if l.Request != "" {
		method = http.MethodPost
	}
	req, err := http.NewRequestWithContext(ctx, method, l.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if l.Request != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	// One request first, so that a broken path fails fast with its reason.
	if err := l.once(client, req); err != nil {
		return nil, fmt.Errorf("load %s via %q: %w", l.URL, l.Proxy, err)
	}

	var (
		phase    atomic.Int32 // 0 warming up, 1 measuring, 2 stopped
		wg       sync.WaitGroup
		hists    = make([]Histogram, l.Concurrency)
		counts   = make([]struct{ ok, bad uint64 }, l.Concurrency)
		errMu    sync.Mutex
		firstErr error
	)
	for i := range l.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := req.Clone(ctx)
			for {
				p0 := phase.Load()
				if p0 == 2 {
					return
				}
				t0 := time.Now()
				err := l.once(client, req)
				d := time.Since(t0)
				// Only requests wholly inside the measured window count.
				if p0 != 1 || phase.Load() != 1 {
					continue
				}
				if err != nil {
					counts[i].bad++
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
					continue
				}
				counts[i].ok++
				hists[i].Record(d)
			}
		}()
	}
	sleep(ctx, l.Warmup)
	phase.Store(1)
	start := time.Now()
	if onStart != nil {
		onStart()
	}
	sleep(ctx, l.Duration)
	phase.Store(2)
	elapsed := time.Since(start)
	if onStop != nil {
		onStop()
	}
	wg.Wait()
	res := &LoadResult{Elapsed: elapsed, FirstErr: firstErr}
	for i := range hists {
		res.Hist.Merge(&hists[i])
		res.Requests += counts[i].ok
		res.Errors += counts[i].bad
	}
	return res, ctx.Err()
}

func (l Load) once(c *http.Client, req *http.Request) error {
	if l.Request != "" {
		req.Body = io.NopCloser(strings.NewReader(l.Request))
		req.ContentLength = int64(len(l.Request))
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	if l.BodyBytes > 0 && n != l.BodyBytes {
		return fmt.Errorf("body of %d bytes, want %d", n, l.BodyBytes)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
