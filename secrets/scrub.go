package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Redaction replaces an injected secret value found in a response.
const Redaction = "[airlock:redacted]"

// scrubber removes injected values, in every spelling patternsFor lists, from responses. It
// implements Scrubber.
type scrubber struct {
	m          *matcher
	n          int           // values
	decodeFree int64         // see maxDecodeRatio
	hits       *atomic.Int64 // Redaction markers written, when counted (forRequest)
}

var _ Scrubber = (*scrubber)(nil)

// newScrubber returns a scrubber for vals, or nil when there is nothing to scrub.
func newScrubber(vals []Secret) *scrubber {
	var s []string
	for _, v := range vals {
		if v.v != "" && !slices.Contains(s, v.v) {
			s = append(s, v.v)
		}
	}
	m := compile(s)
	if m == nil {
		return nil
	}
	return &scrubber{m: m, n: len(s), decodeFree: decodeFree}
}

// forRequest returns a scrubber for one request: s (compiled once per value and shared)
// with its own count of redactions.
func (s *scrubber) forRequest() *scrubber {
	if s == nil {
		return nil
	}
	c := *s
	c.hits = new(atomic.Int64)
	return &c
}

// Redactions is how many Redaction markers s has written so far (in the status line,
// headers, trailers, body and error texts): how often the upstream echoed a value whole.
func (s *scrubber) Redactions() int64 {
	if s == nil || s.hits == nil {
		return 0
	}
	return s.hits.Load()
}

func (s *scrubber) count(n int64) {
	if n > 0 && s.hits != nil {
		s.hits.Add(n)
	}
}

// replace redacts v and counts the markers.
func (s *scrubber) replace(v string) string {
	out, n := s.m.replace(v)
	s.count(n)
	return out
}

// Format implements fmt.Formatter: the secrets are never printed.
func (s *scrubber) Format(f fmt.State, _ rune) {
	_, _ = fmt.Fprintf(f, "secrets.scrubber{%d values: %s}", s.n, redacted)
}

// UninspectableError says that a response could not be checked for injected values, so it
// must not reach the sandbox. What names the reason, for the agent ("content-encoding
// \"br\"", "a gzip file").
type UninspectableError struct{ What string }

func (e *UninspectableError) Error() string {
	return "the response cannot be checked for injected credentials: " + e.What
}

// ScrubResponse makes resp safe to pass on: status text, header names and values, trailers
// (scrubbed when the body ends, where the transport fills them in) and the body, decoded
// from gzip or deflate and scrubbed while it streams (bytes that may begin a value are held
// back until the next bytes decide; Content-Length is dropped). It reads the body's first
// bytes before returning. When the body cannot be checked it closes it and returns an
// *UninspectableError: a partial response (206, multipart/byteranges), stacked or unknown
// content codings, a body that does not decode, or a compressed payload (an archive or
// compressed file, by media type or by its first bytes), whatever the sandbox would do with
// it could bring a value out that the scrubber never saw.
func (s *scrubber) ScrubResponse(resp *http.Response) error {
	if s == nil || resp == nil {
		return nil
	}
	s.ScrubHead(resp)
	refuse := func(what string) error {
		if resp.Body != nil {
			_ = resp.Body.Close()
		}
		resp.Body = http.NoBody
		return &UninspectableError{What: what}
	}
	mt := mediaType(resp.Header)
	if resp.StatusCode == http.StatusPartialContent || mt == "multipart/byteranges" {
		return refuse("a partial response (" + resp.Status + ", " + mt + "), which could split a value over several responses")
	}
	if resp.Body == nil || resp.Body == http.NoBody || resp.StatusCode == http.StatusSwitchingProtocols {
		return nil
	}
	if bodiless(resp) {
		// Nothing of a body reaches the client; reading one would only fail (HTTP/2 reports
		// a 304's declared Content-Length without data as an unexpected EOF). A 304's or a
		// HEAD answer's length is the resource's and stays; a 1xx or 204 has none (RFC 9110,
		// 8.6), and a client that believed one could wait for bytes that never come.
		_ = resp.Body.Close()
		resp.Body = http.NoBody
		if resp.StatusCode < 200 || resp.StatusCode == http.StatusNoContent {
			resp.Header.Del("Content-Length")
			resp.ContentLength = 0
		}
		return nil
	}
	body := resp.Body
	var decoded io.Reader = body
	switch enc := contentCodings(resp.Header); {
	case len(enc) > 1:
		return refuse(fmt.Sprintf("stacked content codings %q", strings.Join(enc, ", ")))
	case len(enc) == 1:
		d, ok := decoders[enc[0]]
		if !ok {
			return refuse(fmt.Sprintf("content-encoding %q", enc[0]))
		}
		in := &countReader{r: body}
		decoded = &bombGuard{r: &lazyDecoder{src: in, open: d}, in: in, free: s.decodeFree}
	}
	head := make([]byte, sniffLen)
	n, err := io.ReadFull(decoded, head)
	head = head[:n]
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		var ue *UninspectableError
		if errors.As(err, &ue) {
			return refuse(ue.What)
		}
		return refuse("a body that could not be read or decoded (" + s.ScrubString(err.Error()) + ")")
	}
	if what := compressedPayload(mt, head); what != "" {
		return refuse(what)
	}
	if decoded != io.Reader(body) {
		resp.Header.Del("Content-Encoding")
		resp.Uncompressed = true
	}
	rest := decoded
	if err != nil {
		rest = eofReader{err}
	}
	scrubbed := s.Reader(readCloser{io.MultiReader(bytes.NewReader(head), rest), body})
	if decoded == io.Reader(body) && resp.ContentLength >= 0 && resp.ContentLength <= wholeBodyMax {
		return s.scrubWhole(resp, scrubbed, refuse)
	}
	resp.Body = scrubbed
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
	return nil
}

// bodiless reports whether resp has no body by definition (RFC 9110, 6.4.1): an answer to
// HEAD, a 1xx, 204 or 304, whatever its Content-Length says.
func bodiless(resp *http.Response) bool {
	return resp.StatusCode < 200 || resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified ||
		resp.Request != nil && resp.Request.Method == http.MethodHead
}

// wholeBodyMax is the largest declared Content-Length whose body ScrubResponse reads and
// scrubs whole before the response goes on.
const wholeBodyMax = 16 << 10

// scrubWhole reads the scrubbed body of a response that declared a small length and gives
// the response exactly the scrubbed bytes and their length. The response then goes out
// with a Content-Length instead of chunked: through an intercepted tunnel each chunk's
// framing was a TLS record and a write of its own (five for a 20-byte body, where the
// length lets it go in one). A compressed payload found in it refuses the whole response
// instead of cutting it after the status line. Announced or received trailers keep it
// chunked (a Content-Length response has none).
func (s *scrubber) scrubWhole(resp *http.Response, scrubbed io.ReadCloser, refuse func(string) error) error {
	out, err := io.ReadAll(scrubbed)
	if err != nil {
		var ue *UninspectableError
		if errors.As(err, &ue) {
			return refuse(ue.What)
		}
		return refuse("a body that could not be read (" + s.ScrubString(err.Error()) + ")")
	}
	resp.Body = readCloser{bytes.NewReader(out), scrubbed}
	if len(resp.Trailer) > 0 {
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
		return nil
	}
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	resp.TransferEncoding = nil
	return nil
}

// ScrubHead scrubs resp's status text, header names and values and trailers, and leaves
// the body unread: for destinations whose rule declares they never reflect credentials.
func (s *scrubber) ScrubHead(resp *http.Response) {
	if s == nil || resp == nil {
		return
	}
	resp.Status = s.ScrubString(resp.Status)
	s.header(resp.Header)
	s.header(resp.Trailer) // the names announced so far; the values come at the end
	if resp.Body != nil && resp.Body != http.NoBody && resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Body = &trailerGuard{src: resp.Body, resp: resp, s: s}
	}
}

// ScrubString returns v with every value redacted.
func (s *scrubber) ScrubString(v string) string {
	if s == nil {
		return v
	}
	return s.replace(v)
}

// header scrubs the names and values of h in place (h may be shared with a writer that
// reads it later, as the transport's trailers are).
func (s *scrubber) header(h http.Header) {
	if len(h) == 0 {
		return
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	for _, k := range keys {
		vs := h[k]
		for i, v := range vs {
			vs[i] = s.replace(v)
		}
		if nk := s.replace(k); nk != k {
			delete(h, k)
			h[nk] = append(h[nk], vs...)
		}
	}
}

// scrubError hides values in the text of an error from the upstream's side (a malformed
// response quoted by the transport, HTTP/2 GOAWAY debug data).
func (s *scrubber) scrubError(err error) error {
	var ue *UninspectableError
	if err == nil || err == io.EOF || errors.As(err, &ue) {
		return err
	}
	return &scrubbedError{msg: s.replace(err.Error()), err: err}
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }

// Is lets errors.Is see the original (net.ErrClosed, context.Canceled) without Unwrap,
// which would hand out its text.
func (e *scrubbedError) Is(target error) bool { return errors.Is(e.err, target) }

// trailerGuard scrubs the response's trailers when the body ends (the transport fills them
// in as it reads the end of the body) and when it is closed, and the text of read errors.
type trailerGuard struct {
	src  io.ReadCloser
	resp *http.Response
	s    *scrubber
}

func (g *trailerGuard) Read(p []byte) (int, error) {
	n, err := g.src.Read(p)
	if err == io.EOF {
		g.s.header(g.resp.Trailer)
	}
	return n, g.s.scrubError(err)
}

func (g *trailerGuard) Close() error {
	err := g.src.Close()
	g.s.header(g.resp.Trailer)
	return g.s.scrubError(err)
}

// Reader returns a ReadCloser yielding src with every whole value replaced by Redaction. The
// last bytes read (the longest pattern less one, whatever they are) are held back until more
// arrive or src ends; a prefix of a value at the end of src is passed on as it is; after a
// read error the held bytes are dropped. Where the signature of a compressed format
// (signatures) begins, the stream ends with an *UninspectableError: what came before it is
// passed on, it and what follows are not.
func (s *scrubber) Reader(src io.ReadCloser) io.ReadCloser {
	r := &scrubReader{src: src, s: s, red: newRedactor(s.m)}
	r.red.sigs = true
	return r
}

// streamBufs are a scrubReader's working buffers, reused across responses: one chunk
// per response was most of the scrubbing cost on small bodies, and the held-back input and
// the output growing from nothing to a chunk's size on every streamed response were most
// of its allocation (and of the collector's work) on large ones.
type streamBufs struct {
	chunk   []byte // what is read from the source
	pending []byte // the redactor's input not yet emitted: up to a chunk and the window
	out     []byte // what is emitted: up to a chunk and the window, and markers
}

const streamChunk = 32 << 10

// pending and out start empty and grow to what the bodies read with them needed: a small
// body's stay small.
var streamPool = sync.Pool{New: func() any { return &streamBufs{chunk: make([]byte, streamChunk)} }}

type scrubReader struct {
	src  io.ReadCloser
	s    *scrubber
	red  redactor
	bufs *streamBufs // from streamPool while the body is read; returned once it is over
	out  []byte      // output not yet read
	buf  []byte      // out's backing array, reused from chunk to chunk
	err  error
	hits int64 // red.markers already counted
}

func (r *scrubReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.err != nil {
			r.release()
			return 0, r.err
		}
		if r.bufs == nil {
			r.bufs = streamPool.Get().(*streamBufs)
			r.red.pending, r.buf = r.bufs.pending[:0], r.bufs.out[:0]
		}
		n, err := r.src.Read(r.bufs.chunk)
		out := r.red.feed(r.bufs.chunk[:n], r.buf[:0])
		if r.red.sigAt >= 0 {
			// Nothing at or after the signature was emitted: it starts after the hold-back.
			err = &UninspectableError{What: fmt.Sprintf("a compressed payload (%s at byte %d of the body)", r.red.sigName, r.red.sigAt)}
		}
		if err != nil {
			if err == io.EOF {
				out = r.red.finish(out)
			}
			r.err = r.s.scrubError(err)
		}
		r.s.count(r.red.markers - r.hits)
		r.hits = r.red.markers
		r.out, r.buf = out, out[:0]
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

// keepable is b emptied, to go back to streamPool, or nil when it grew past what a pool
// item keeps (a body of many short values grows its output several times over).
func keepable(b []byte) []byte {
	if cap(b) > 4*streamChunk {
		return nil
	}
	return b[:0]
}

// release gives the working buffers back once the body is over and its output read (it
// runs in Read, not in Close, which may run concurrently with a Read). Buffers that grew
// (a long pattern's window, many markers) go back grown, within keepable's bound.
func (r *scrubReader) release() {
	b := r.bufs
	if b == nil {
		return
	}
	r.bufs = nil
	b.pending, b.out = keepable(r.red.pending), keepable(r.buf)
	r.red.pending, r.buf, r.out = nil, nil, nil
	streamPool.Put(b)
}

func (r *scrubReader) Close() error { return r.src.Close() }
