package proxy

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestScrubbedResponseLength is what docs/credentials.md says of Content-Length: a
// scrubbed response never carries the upstream's (its body may be shorter or longer once
// redacted); the sandbox gets the body chunked or with a Content-Length that counts the
// bytes it receives (always the latter for a body of up to 16 KiB whose length the
// upstream declared). A destination declared "reflects": false keeps the upstream's.
func TestScrubbedResponseLength(t *testing.T) {
	re := newReflectEnv(t)
	upstream := len("you sent " + re.canary + " to airlock's upstream\n")
	for kind, base := range re.bases {
		t.Run(kind, func(t *testing.T) {
			o := parse(re.exchange(t, base, "/echo/body", "", ""))
			if o.status != 200 || !strings.Contains(o.body, "[airlock:redacted]") || len(o.body) == upstream {
				t.Fatalf("got %d %q, want 200 and the body redacted to another length than the upstream's %d", o.status, o.body, upstream)
			}
			// A small body with a declared length is scrubbed whole and sent with its new
			// length, not chunked: in an intercepted tunnel each chunk's framing was a TLS
			// record and a write of its own.
			if cl := o.header.Get("Content-Length"); cl != strconv.Itoa(len(o.body)) {
				t.Errorf("scrubbed: Content-Length %q for a body of %d bytes (the upstream's was %d); want the scrubbed length", cl, len(o.body), upstream)
			}
			if head, _, _ := bytes.Cut(o.raw, []byte("\r\n\r\n")); bytes.Contains(bytes.ToLower(head), []byte("transfer-encoding")) {
				t.Errorf("scrubbed: sent chunked (%q); want a Content-Length", head)
			}
			o = parse(re.exchange(t, base, "/quiet/body", "", ""))
			if cl := o.header.Get("Content-Length"); o.status != 200 || cl != strconv.Itoa(upstream) || len(o.body) != upstream {
				t.Errorf("reflects false: got %d, Content-Length %q, body of %d; want 200 and the upstream's %d kept", o.status, cl, len(o.body), upstream)
			}
		})
	}
}

// Red team: a small body with a declared length is read whole before the client gets a
// byte of it; an upstream that trickled it past the idle timeout had the client's
// connection time out meanwhile (plain HTTP: the request was cancelled, a 502 "context
// canceled"). Bytes arriving from upstream keep the client's connection open, read whole or
// streamed.
func TestSmallBodyTrickledPastIdleTimeout(t *testing.T) {
	const idle = 600 * time.Millisecond
	const piece, pieces = "0123456789", 10 // 1.5 s of body, 150 ms apart
	re := newReflectEnvServing(t, Limits{IdleTimeout: idle}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(piece)*pieces))
		for range pieces {
			if _, err := io.WriteString(w, piece); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(150 * time.Millisecond)
		}
	}))
	for kind, base := range re.bases {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			o := parse(re.exchange(t, base, "/echo/drip", "", ""))
			want := strings.Repeat(piece, pieces)
			if o.status != 200 || o.body != want || o.header.Get("Content-Length") != strconv.Itoa(len(want)) {
				t.Fatalf("got %d %q (Content-Length %q), want 200 and the %d-byte body whole; idle timeout %s, 150 ms between pieces\n%s",
					o.status, o.body, o.header.Get("Content-Length"), len(want), idle, o.raw)
			}
		})
	}
}

// A 304 or 204 has no body whatever its Content-Length says. Over HTTP/2 the transport
// reported a 304's declared length without data as an unexpected EOF, and the scrubber,
// reading for the body's first bytes, refused the response with a 502 (red team).
func TestBodilessAnswersWithALengthPass(t *testing.T) {
	re := newReflectEnvServing(t, Limits{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "10")
		w.Header().Set("ETag", `"v1"`)
		code, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/echo/"))
		w.WriteHeader(code)
	}))
	for kind, base := range re.bases {
		for _, code := range []int{http.StatusNotModified, http.StatusNoContent} {
			o := parse(re.exchange(t, base, "/echo/"+strconv.Itoa(code), "", ""))
			if o.status != code || o.body != "" || o.header.Get("Etag") != `"v1"` {
				t.Errorf("%s: upstream %d with Content-Length 10 and no body: got %d %q, want it passed on\n%s", kind, code, o.status, o.body, o.raw)
			}
			if code == http.StatusNoContent && o.header.Get("Content-Length") != "" {
				t.Errorf("%s: a 204 passed on with Content-Length %q; a 204 has none\n%s", kind, o.header.Get("Content-Length"), o.raw)
			}
		}
	}
}
