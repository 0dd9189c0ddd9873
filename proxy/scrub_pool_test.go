package proxy

// Red team of the pooled stream buffers through the proxy: many responses at once over
// plain HTTP, intercepted HTTPS/1.1 and HTTPS/2, streamed and whole, gzip, upstream
// aborts mid-value and clients leaving mid-stream. No response may hold another's bytes or
// any form of the credential.

import (
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

var rtTagRE = regexp.MustCompile(`<r(\d+)>`)

func rtPoolHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		parts := strings.Split(r.URL.Path, "/") // /echo/pool/<id>/<mode>
		if len(parts) < 5 {
			http.Error(w, "bad", 404)
			return
		}
		id, mode := parts[3], parts[4]
		tag := "<r" + id + ">"
		line := func(j int) string {
			switch j % 4 {
			case 0:
				return fmt.Sprintf("%s line %d %s\n", tag, j, tok)
			case 1:
				return fmt.Sprintf("%s line %d %s\n", tag, j, base64.StdEncoding.EncodeToString([]byte(tok)))
			case 2:
				return fmt.Sprintf("%s line %d %s\n", tag, j, strings.ToUpper(tok))
			}
			return fmt.Sprintf("%s line %d plain\n", tag, j)
		}
		w.Header().Set("Content-Type", "text/plain")
		switch mode {
		case "small": // declared length <= 16 KiB: scrubbed whole
			var b strings.Builder
			for j := 0; b.Len() < 8<<10; j++ {
				b.WriteString(line(j))
			}
			w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
			io.WriteString(w, b.String())
		case "stream", "abort", "gzip":
			var out io.Writer = w
			var zw *gzip.Writer
			if mode == "gzip" {
				w.Header().Set("Content-Encoding", "gzip")
				zw = gzip.NewWriter(w)
				out = zw
			}
			for j := 0; j < 6000; j++ {
				io.WriteString(out, line(j))
				if j%500 == 0 {
					if zw != nil {
						zw.Flush()
					}
					w.(http.Flusher).Flush()
				}
				if mode == "abort" && j == 3000 {
					// The value's first bytes, then the upstream goes away.
					io.WriteString(out, tag+" "+tok[:len(tok)-2])
					w.(http.Flusher).Flush()
					panic(http.ErrAbortHandler)
				}
			}
			if zw != nil {
				zw.Close()
			}
		}
	})
}

func TestRTPoolProxyConcurrentMixedEndings(t *testing.T) {
	re := newReflectEnvServing(t, Limits{MaxRedactionsPerCredential: 1 << 30}, rtPoolHandler())
	c := re.client(nil)
	c.Timeout = 30 * time.Second
	modes := []string{"small", "stream", "abort", "gzip", "leave"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var fails []string
	fail := func(f string, a ...any) {
		mu.Lock()
		fails = append(fails, fmt.Sprintf(f, a...))
		mu.Unlock()
	}
	var n, okBodies int
	var nmu sync.Mutex
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bases := []string{re.bases["http"], re.bases["https/1.1"], re.bases["https/2"]}
			for k := range 15 {
				id := g*1000 + k
				mode := modes[(g+k)%len(modes)]
				base := bases[(g+2*k)%len(bases)]
				m := mode
				if m == "leave" {
					m = "stream"
				}
				resp, err := c.Get(fmt.Sprintf("%s/echo/pool/%d/%s", base, id, m))
				if err != nil {
					if mode != "abort" {
						fail("%d %s %s: %v", id, mode, base, err)
					}
					continue
				}
				var body []byte
				if mode == "leave" { // the client goes away mid-stream
					buf := make([]byte, 50<<10)
					k, _ := io.ReadFull(resp.Body, buf)
					body = buf[:k]
				} else {
					body, err = io.ReadAll(resp.Body)
					if err == nil && mode != "abort" {
						nmu.Lock()
						okBodies++
						nmu.Unlock()
					}
				}
				resp.Body.Close()
				if l := e2etest.Leak(body, re.canary); l != "" {
					fail("%d %s %s: the credential as %s", id, mode, base, l)
				}
				if strings.Contains(string(body), re.canary[:len(re.canary)-2]) {
					fail("%d %s %s: a held-back prefix of the credential", id, mode, base)
				}
				for _, mm := range rtTagRE.FindAllStringSubmatch(string(body), -1) {
					if mm[1] != strconv.Itoa(id) {
						fail("%d %s %s: bytes of response %s", id, mode, base, mm[1])
						break
					}
				}
				if mode == "stream" || mode == "gzip" || mode == "small" {
					if resp.StatusCode != 200 || !strings.Contains(string(body), "line 5999") && mode != "small" {
						fail("%d %s %s: status %d, %d bytes, incomplete", id, mode, base, resp.StatusCode, len(body))
					}
				}
				nmu.Lock()
				n++
				nmu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d responses, %d complete", n, okBodies)
	for _, f := range fails {
		t.Error(f)
	}
}
