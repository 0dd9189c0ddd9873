package secrets

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
)

// contentCodings lists the codings of Content-Encoding (every field, comma-separated),
// without identity.
func contentCodings(h http.Header) []string {
	var out []string
	for _, v := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				out = append(out, c)
			}
		}
	}
	return out
}

func mediaType(h http.Header) string {
	ct := h.Get("Content-Type")
	if ct == "" {
		return ""
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		mt, _, _ = strings.Cut(ct, ";")
		mt = strings.ToLower(strings.TrimSpace(mt))
	}
	return mt
}

// decoders open the content codings the scrubber reads.
var decoders = map[string]func(io.Reader) (io.Reader, error){
	"gzip":   func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) },
	"x-gzip": func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) },
	// RFC 9110 deflate is a zlib stream; some servers send raw deflate.
	"deflate": func(r io.Reader) (io.Reader, error) {
		var hdr [2]byte
		n, err := io.ReadFull(r, hdr[:])
		if err != nil {
			if n == 0 && err == io.EOF {
				return bytes.NewReader(nil), nil
			}
			return nil, err
		}
		r = io.MultiReader(bytes.NewReader(hdr[:]), r)
		if hdr[0]&0x0f == 8 && (uint16(hdr[0])<<8|uint16(hdr[1]))%31 == 0 {
			return zlib.NewReader(r)
		}
		return flate.NewReader(r), nil
	},
}

// Decoded bodies may grow to maxDecodeRatio times the bytes read once past decodeFree: a
// small compressed body that inflates without bound (a bomb) is cut off.
const (
	maxDecodeRatio = 100
	decodeFree     = 16 << 20
)

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type bombGuard struct {
	r    io.Reader
	in   *countReader
	out  int64
	free int64
}

func (b *bombGuard) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.out += int64(n)
	if b.out > b.free && b.out > maxDecodeRatio*b.in.n {
		return n, &UninspectableError{What: fmt.Sprintf("a body that decodes to more than %d times its size", maxDecodeRatio)}
	}
	return n, err
}

// lazyDecoder opens a decompressor on first read.
type lazyDecoder struct {
	src  io.Reader
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

type readCloser struct {
	io.Reader
	io.Closer
}

type eofReader struct{ err error }

func (e eofReader) Read([]byte) (int, error) {
	if e.err == io.ErrUnexpectedEOF {
		return 0, io.EOF // the body was shorter than sniffLen
	}
	return 0, e.err
}

// sniffLen is how many bytes of a body are read before it is passed on: enough for the
// signatures below.
const sniffLen = 8

// compressedPayload names the compressed or archive format of a body, by its media type or
// its first bytes ("" if none): content a client decompresses itself, past the scrubber.
func compressedPayload(mt string, head []byte) string {
	if slices.Contains(compressedTypes, mt) || strings.HasSuffix(mt, "+zip") || strings.HasSuffix(mt, "+gzip") ||
		strings.HasPrefix(mt, "application/vnd.openxmlformats-officedocument.") || strings.HasPrefix(mt, "application/vnd.oasis.opendocument.") {
		return "a compressed payload (" + mt + ")"
	}
	if name := headPayload(head); name != "" {
		return "a compressed payload (" + name + " data)"
	}
	return ""
}

var compressedTypes = []string{
	"application/gzip", "application/x-gzip", "application/x-gunzip", "application/gzipped",
	"application/gzip-compressed", "application/x-gtar", "application/x-tgz",
	"application/zip", "application/x-zip", "application/x-zip-compressed", "application/java-archive",
	"application/x-bzip", "application/x-bzip2", "application/x-xz", "application/x-lzma",
	"application/x-lzip", "application/x-lz4", "application/zstd", "application/x-zstd",
	"application/x-compress", "application/x-compressed", "application/x-7z-compressed",
	"application/x-rar-compressed", "application/vnd.rar", "application/x-brotli", "application/brotli",
	"application/zlib", "application/x-deflate",
	// Formats that carry deflate or brotli streams inside.
	"application/pdf", "image/png", "image/apng", "font/woff", "font/woff2", "application/font-woff",
}
