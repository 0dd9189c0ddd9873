package secrets

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Redaction replaces an injected secret value found in a response.
const Redaction = "[airlock:redacted]"

// scrubber removes injected values from responses. It implements Scrubber.
type scrubber struct {
	secrets []Secret // longest first, no duplicates, none empty
	raw     [][]byte // the same values as bytes
}

var _ Scrubber = (*scrubber)(nil)

// newScrubber returns a scrubber for vals, or nil when there is nothing to scrub.
func newScrubber(vals []Secret) *scrubber {
	seen := map[string]bool{}
	var s []Secret
	for _, v := range vals {
		if v.v == "" || seen[v.v] {
			continue
		}
		seen[v.v] = true
		s = append(s, v)
	}
	if len(s) == 0 {
		return nil
	}
	slices.SortStableFunc(s, func(a, b Secret) int { return len(b.v) - len(a.v) })
	raw := make([][]byte, len(s))
	for i, v := range s {
		raw[i] = []byte(v.v)
	}
	return &scrubber{secrets: s, raw: raw}
}

// Format implements fmt.Formatter: the secrets are never printed.
func (s *scrubber) Format(f fmt.State, _ rune) {
	_, _ = fmt.Fprintf(f, "secrets.scrubber{%d values: %s}", len(s.secrets), redacted)
}

// ScrubResponse replaces every injected value in resp's headers, trailers and body with
// Redaction. The body is scrubbed while it streams (a window of the longest value is held
// back), so Content-Length is dropped. A body in an encoding that cannot be decoded here is
// replaced with a 502: an unreadable body could carry the value past the scrubber.
func (s *scrubber) ScrubResponse(resp *http.Response) {
	if s == nil || resp == nil {
		return
	}
	s.header(resp.Header)
	s.header(resp.Trailer)
	if resp.Body == nil || resp.Body == http.NoBody {
		return
	}
	body := resp.Body
	switch enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		body = &lazyDecoder{src: body, open: func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }}
		resp.Header.Del("Content-Encoding")
	case "deflate":
		body = &lazyDecoder{src: body, open: func(r io.Reader) (io.Reader, error) { return flate.NewReader(r), nil }}
		resp.Header.Del("Content-Encoding")
	default:
		_ = body.Close()
		msg := fmt.Sprintf("airlock: the upstream answered with content-encoding %q, which airlock cannot check for injected credentials; retry with Accept-Encoding: identity\n", enc)
		resp.StatusCode, resp.Status = http.StatusBadGateway, "502 Bad Gateway"
		resp.Header = http.Header{"Content-Type": {"text/plain; charset=utf-8"}}
		resp.Body = io.NopCloser(strings.NewReader(msg))
		resp.ContentLength = int64(len(msg))
		resp.Header.Set("Content-Length", strconv.Itoa(len(msg)))
		resp.Uncompressed = false
		return
	}
	resp.Body = s.Reader(body)
	resp.ContentLength = -1
	resp.Header.Del("Content-Length")
}

func (s *scrubber) header(h http.Header) {
	for k, vs := range h {
		for i, v := range vs {
			vs[i] = s.replaceString(v)
		}
		h[k] = vs
	}
}

func (s *scrubber) replaceString(v string) string {
	for _, sec := range s.secrets {
		v = strings.ReplaceAll(v, sec.v, Redaction)
	}
	return v
}

// Reader returns a ReadCloser yielding src with every value replaced by Redaction.
func (s *scrubber) Reader(src io.ReadCloser) io.ReadCloser {
	return &scrubReader{src: src, s: s, hold: len(s.secrets[0].v) - 1}
}

// chunks are the read buffers of scrubReaders, reused across responses: one per response
// was most of the scrubbing cost on small bodies.
var chunks = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// scrubReader streams src through the scrubber. pending holds input not yet emitted: at most
// hold bytes (a possible prefix of a value) between reads plus one chunk while working.
type scrubReader struct {
	src     io.ReadCloser
	s       *scrubber
	hold    int
	chunk   *[]byte // from chunks, returned at the end of the body
	pending []byte
	out     []byte
	buf     []byte // out's backing array, reused from chunk to chunk
	err     error
}

func (r *scrubReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.chunk == nil {
			r.chunk = chunks.Get().(*[]byte)
		}
		n, err := r.src.Read(*r.chunk)
		r.pending = append(r.pending, (*r.chunk)[:n]...)
		if err != nil {
			r.err = err
			// Returned here, not in Close, which may run concurrently with a Read.
			chunks.Put(r.chunk)
			r.chunk = nil
		}
		r.out = r.buf[:0]
		r.process(err != nil)
		r.buf = r.out[:0]
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

// process moves pending to out, replacing every complete occurrence; unless final, it keeps
// back the last hold bytes, which may be the start of a value that the next read completes.
func (r *scrubReader) process(final bool) {
	i, wait := 0, -1
	for {
		at, l := r.s.find(r.pending[i:])
		if at < 0 {
			break
		}
		if !final && r.s.longerMayFollow(r.pending[i+at:], l) {
			wait = i + at // a longer value may start here: decide when more input arrives
			break
		}
		r.out = append(r.out, r.pending[i:i+at]...)
		r.out = append(r.out, Redaction...)
		i += at + l
	}
	keep := 0
	switch {
	case wait >= 0:
		keep = len(r.pending) - wait
	case !final:
		keep = min(r.hold, len(r.pending)-i)
	}
	r.out = append(r.out, r.pending[i:len(r.pending)-keep]...)
	r.pending = append(r.pending[:0], r.pending[len(r.pending)-keep:]...)
}

// find returns the leftmost occurrence of any value in b (the longest at that position).
func (s *scrubber) find(b []byte) (at, length int) {
	at = -1
	for _, sec := range s.raw {
		j := bytes.Index(b, sec)
		if j >= 0 && (at < 0 || j < at) {
			at, length = j, len(sec)
		}
	}
	return at, length
}

// longerMayFollow reports whether tail (which starts with a match of length l) is a proper
// prefix of a longer value, so that more input could turn it into that longer match.
func (s *scrubber) longerMayFollow(tail []byte, l int) bool {
	for _, sec := range s.raw {
		if len(sec) > l && len(tail) < len(sec) && bytes.HasPrefix(sec, tail) {
			return true
		}
	}
	return false
}

func (r *scrubReader) Close() error { return r.src.Close() }

// lazyDecoder opens a decompressor on first read (so that a header-only response costs
// nothing) and closes the source.
type lazyDecoder struct {
	src  io.ReadCloser
	open func(io.Reader) (io.Reader, error)
	r    io.Reader
	err  error
}

func (d *lazyDecoder) Read(p []byte) (int, error) {
	if d.r == nil && d.err == nil {
		d.r, d.err = d.open(d.src)
	}
	if d.err != nil {
		return 0, fmt.Errorf("decode upstream body: %w", d.err)
	}
	return d.r.Read(p)
}

func (d *lazyDecoder) Close() error { return d.src.Close() }
