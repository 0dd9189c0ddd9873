package e2etest

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
)

// Reflector is an upstream that echoes the credential it is sent (the token of its
// Authorization header, "Bearer TOKEN") back in one of the ways a response can carry it;
// the last segment of the path names the way (ReflectWays lists them). It is what a
// reflecting destination, such as an echo service, can do; it records every request.
type Reflector struct {
	mu   sync.Mutex
	seen []Reflected
}

// Reflected is one request as the Reflector received it.
type Reflected struct {
	Path, Token, Range, IfRange, Upgrade, Extensions string
}

// Seen returns the requests received so far.
func (rf *Reflector) Seen() []Reflected {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	return append([]Reflected(nil), rf.seen...)
}

// Last returns the last request received for a path ending in way.
func (rf *Reflector) Last(way string) (Reflected, bool) {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	for i := len(rf.seen) - 1; i >= 0; i-- {
		if path.Base(rf.seen[i].Path) == way {
			return rf.seen[i], true
		}
	}
	return Reflected{}, false
}

// ReflectWays are the ways the Reflector can echo the token. Those marked h1 need an
// HTTP/1 connection (they hijack it).
var ReflectWays = []string{
	"body", "json", "header", "header-name", "trailer", "trailer-undeclared", "early-hints",
	"chunks", "prefix-at-end", "status-h1", "malformed-h1", "upgrade-h1",
	"range", "multirange", "partial",
	"gzip", "gzip-gzip", "gzip-two-headers", "br", "gzip-file", "gzip-octet", "zip",
	"gzip-after-prefix", "multipart-gzip", "gzip-after-long-prefix", "multipart-gzip-long", "tar-gzip", "b64-gzip",
	"b64", "b64url", "b64-offset1", "b64-offset2", "b64-mime", "hex", "HEX", "urlenc", "lower", "upper",
	"json-unicode", "html", "html-padded", "utf16",
}

// CutWays are the ways whose compressed payload starts past the beginning of the body. A
// body of up to 16 KiB with a declared length is scrubbed whole, and the response refused
// (502); a longer one (the -long ways) has begun when the payload comes, so the scrubber cuts
// it there instead.
var CutWays = []string{"gzip-after-prefix", "multipart-gzip", "gzip-after-long-prefix", "multipart-gzip-long", "tar-gzip", "b64-gzip"}

// longPrefix repeats s past the 16 KiB that the scrubber reads whole.
func longPrefix(s string) string { return strings.Repeat(s, 20<<10/len(s)+1) }

func (rf *Reflector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	rf.mu.Lock()
	rf.seen = append(rf.seen, Reflected{Path: r.URL.Path, Token: tok, Range: r.Header.Get("Range"), IfRange: r.Header.Get("If-Range"),
		Upgrade: r.Header.Get("Upgrade"), Extensions: r.Header.Get("Sec-WebSocket-Extensions")})
	rf.mu.Unlock()
	if tok == "" {
		tok = "no-credential-was-sent"
	}
	body := func(ct string, b []byte) {
		w.Header().Set("Content-Type", ct)
		_, _ = w.Write(b)
	}
	text := "you sent " + tok + " to airlock's upstream\n"
	switch way := path.Base(r.URL.Path); way {
	case "body":
		body("text/plain", []byte(text))
	case "json":
		b, _ := json.Marshal(map[string]any{"headers": map[string]string{"Authorization": r.Header.Get("Authorization")}, "url": "https://x.test/?t=" + tok})
		body("application/json", b)
	case "header":
		w.Header().Set("X-Echo", tok)
		w.Header().Add("Set-Cookie", "t="+url.QueryEscape(tok))
		body("text/plain", []byte("ok\n"))
	case "header-name":
		w.Header()["X-"+tok] = []string{"1"}
		body("text/plain", []byte("ok\n"))
	case "trailer":
		w.Header().Set("Trailer", "X-Echo")
		body("text/plain", []byte("body first\n"))
		w.Header().Set("X-Echo", tok)
	case "trailer-undeclared":
		body("text/plain", []byte("body first\n"))
		w.(http.Flusher).Flush()
		w.Header().Set(http.TrailerPrefix+"X-Late", tok)
		w.Header().Set(http.TrailerPrefix+"X-"+tok, "1")
	case "early-hints":
		w.Header().Set("Link", "</s/"+tok+">; rel=preload")
		w.Header().Set("X-Hint", tok)
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Del("X-Hint")
		body("text/plain", []byte("final\n"))
	case "chunks": // the token split over several writes, each flushed
		w.Header().Set("Content-Type", "text/plain")
		for i := 0; i < len(tok); i += 3 {
			_, _ = io.WriteString(w, tok[i:min(i+3, len(tok))])
			w.(http.Flusher).Flush()
			time.Sleep(time.Millisecond)
		}
	case "prefix-at-end": // a response cut short in the middle of the token
		body("text/plain", []byte("ends with "+tok[:len(tok)*3/4]))
	case "status-h1":
		rawResponse(w, "HTTP/1.1 200 "+tok+"\r\nContent-Length: 3\r\n\r\nok\n")
	case "malformed-h1":
		rawResponse(w, "HTTP/1.1 2"+tok+"\r\n\r\n")
	case "upgrade-h1": // a 101 (asked for or not) echoing the token, then on the stream
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nX-Echo: %s\r\n", tok)
		if r.URL.Query().Get("ext") != "" {
			fmt.Fprintf(brw, "Sec-WebSocket-Extensions: permessage-deflate\r\n")
		}
		fmt.Fprintf(brw, "\r\nstream says %s\n", tok)
		_ = brw.Flush()
		_, _ = io.Copy(c, brw) // then echo what the client sends
	case "range":
		w.Header().Set("Content-Type", "text/plain")
		http.ServeContent(w, r, "", time.Unix(1700000000, 0), strings.NewReader(text))
	case "multirange": // byte ranges whether asked for or not, splitting the token
		h := len(tok) / 2
		w.Header().Set("Content-Type", "multipart/byteranges; boundary=SEP")
		w.WriteHeader(http.StatusPartialContent)
		fmt.Fprintf(w, "--SEP\r\nContent-Range: bytes 0-%d/%d\r\n\r\n%s\r\n--SEP\r\nContent-Range: bytes %d-%d/%d\r\n\r\n%s\r\n--SEP--\r\n",
			h-1, len(tok), tok[:h], h, len(tok)-1, len(tok), tok[h:])
	case "partial":
		w.Header().Set("Content-Range", fmt.Sprintf("bytes 0-%d/%d", len(tok)/2-1, len(tok)))
		w.WriteHeader(http.StatusPartialContent)
		_, _ = io.WriteString(w, tok[:len(tok)/2])
	case "gzip":
		w.Header().Set("Content-Encoding", "gzip")
		body("text/plain", Gzip([]byte(text)))
	case "gzip-gzip":
		w.Header().Set("Content-Encoding", "gzip, gzip")
		body("text/plain", Gzip(Gzip([]byte(text))))
	case "gzip-two-headers":
		w.Header()["Content-Encoding"] = []string{"gzip", "gzip"}
		body("text/plain", Gzip(Gzip([]byte(text))))
	case "br":
		w.Header().Set("Content-Encoding", "br")
		body("text/plain", []byte{0x1b, 0x2a, 0x00, 0xf8}) // not checked: refused by its coding
	case "gzip-file":
		body("application/gzip", Gzip([]byte(text)))
	case "gzip-octet":
		body("application/octet-stream", Gzip([]byte(text)))
	case "gzip-after-prefix":
		body("application/octet-stream", append([]byte(strings.Repeat("a prefix before the archive\n", 40)), Gzip([]byte(text))...))
	case "gzip-after-long-prefix":
		body("application/octet-stream", append([]byte(longPrefix("a prefix before the archive\n")), Gzip([]byte(text))...))
	case "multipart-gzip", "multipart-gzip-long":
		first := strings.Repeat("first part ", 100)
		if way == "multipart-gzip-long" {
			first = longPrefix("first part ")
		}
		w.Header().Set("Content-Type", "multipart/mixed; boundary=SEP")
		fmt.Fprintf(w, "--SEP\r\nContent-Type: text/plain\r\n\r\n%s\r\n--SEP\r\nContent-Type: application/octet-stream\r\n\r\n%s\r\n--SEP--\r\n",
			first, Gzip([]byte(text)))
	case "tar-gzip":
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		gzd := Gzip([]byte(text))
		_ = tw.WriteHeader(&tar.Header{Name: "token.txt.gz", Mode: 0o600, Size: int64(len(gzd))})
		_, _ = tw.Write(gzd)
		_ = tw.Close()
		body("application/x-tar", b.Bytes())
	case "b64-gzip":
		body("application/json", []byte(`{"padding":"`+strings.Repeat("x", 1000)+`","blob":"`+base64.StdEncoding.EncodeToString(Gzip([]byte(text)))+`"}`))
	case "b64-mime": // base64 wrapped at 76 columns with CRLF, the token not at the start
		enc := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("-", 70) + text))
		var b strings.Builder
		for i := 0; i < len(enc); i += 76 {
			b.WriteString(enc[i:min(i+76, len(enc))] + "\r\n")
		}
		body("text/plain", []byte(b.String()))
	case "html-padded": // numeric references with leading zeros and no semicolons
		var b strings.Builder
		for _, c := range tok {
			fmt.Fprintf(&b, "&#x%06X", c)
		}
		body("text/html", []byte("<p>"+b.String()+" </p>"))
	case "zip":
		var b bytes.Buffer
		zw := zip.NewWriter(&b)
		f, _ := zw.Create("token.txt")
		_, _ = io.WriteString(f, text)
		_ = zw.Close()
		body("application/octet-stream", b.Bytes())
	case "b64":
		body("text/plain", []byte(base64.StdEncoding.EncodeToString([]byte(tok))))
	case "b64url":
		body("text/plain", []byte(base64.RawURLEncoding.EncodeToString([]byte(tok))))
	case "b64-offset1", "b64-offset2":
		pre := map[string]string{"b64-offset1": "x", "b64-offset2": "xy"}[way]
		body("text/plain", []byte(base64.StdEncoding.EncodeToString([]byte(pre+tok+"-tail"))))
	case "hex":
		body("text/plain", []byte(hex.EncodeToString([]byte(tok))))
	case "HEX":
		body("text/plain", []byte(strings.ToUpper(hex.EncodeToString([]byte(tok)))))
	case "urlenc":
		body("text/plain", []byte("a="+url.QueryEscape(r.Header.Get("Authorization"))+"&b="+strings.ToLower(pct(tok))))
	case "lower":
		body("text/plain", []byte(strings.ToLower(text)))
	case "upper":
		body("text/plain", []byte(strings.ToUpper(text)))
	case "json-unicode":
		var b strings.Builder
		for _, c := range utf16.Encode([]rune(tok)) {
			fmt.Fprintf(&b, `\u%04x`, c)
		}
		body("application/json", []byte(`{"t":"`+b.String()+`"}`))
	case "html":
		var b strings.Builder
		for _, c := range tok {
			fmt.Fprintf(&b, "&#%d;", c)
		}
		body("text/html", []byte("<p>"+b.String()+"</p>"))
	case "utf16":
		var b []byte
		for _, c := range utf16.Encode([]rune(text)) {
			b = append(b, byte(c), byte(c>>8))
		}
		body("text/plain; charset=utf-16le", b)
	default:
		http.Error(w, "no such way: "+way, http.StatusNotFound)
	}
}

func pct(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

func rawResponse(w http.ResponseWriter, raw string) {
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "needs HTTP/1", http.StatusHTTPVersionNotSupported)
		return
	}
	defer c.Close()
	_, _ = brw.WriteString(raw)
	_ = brw.Flush()
}

// Gzip compresses b.
func Gzip(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

// Leak names the form in which b holds tok ("" if none): as text in any case, URL- or
// JSON-escaped, hex, base64 at any alignment, UTF-16, or inside gzip data. Callers check
// everything a sandbox received with it.
func Leak(b []byte, tok string) string {
	low := bytes.ToLower(b)
	forms := map[string]string{
		"text": strings.ToLower(tok), "url-encoded": strings.ToLower(url.QueryEscape(tok)),
		"every byte %XX": strings.ToLower(pct(tok)), "hex": hex.EncodeToString([]byte(tok)),
	}
	for name, f := range forms {
		if bytes.Contains(low, []byte(f)) {
			return name
		}
	}
	var u strings.Builder
	for _, c := range utf16.Encode([]rune(tok)) {
		fmt.Fprintf(&u, `\u%04x`, c)
	}
	if bytes.Contains(low, []byte(u.String())) {
		return "JSON \\u escapes"
	}
	var u16 []byte
	for _, c := range utf16.Encode([]rune(strings.ToLower(tok))) {
		u16 = append(u16, byte(c), byte(c>>8))
	}
	if bytes.Contains(low, u16) {
		return "UTF-16"
	}
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		for k := 0; k < 3; k++ {
			full := enc.EncodeToString(append(make([]byte, k), tok...))
			if core := full[(8*k+5)/6 : (8*k+8*len(tok))/6]; bytes.Contains(b, []byte(core)) {
				return fmt.Sprintf("base64 (alignment %d)", k)
			}
		}
	}
	for i := bytes.Index(b, []byte{0x1f, 0x8b}); i >= 0; {
		if zr, err := gzip.NewReader(bytes.NewReader(b[i:])); err == nil {
			zr.Multistream(false)
			if inner, _ := io.ReadAll(zr); len(inner) > 0 {
				if l := Leak(inner, tok); l != "" {
					return "gzip data holding " + l
				}
			}
		}
		j := bytes.Index(b[i+2:], []byte{0x1f, 0x8b})
		if j < 0 {
			break
		}
		i += 2 + j
	}
	return ""
}

// ReadResponses reads every response in raw (1xx informational ones first), as a client
// would, for checks on what a sandbox received.
func ReadResponses(raw []byte, method string) ([]*http.Response, [][]byte) {
	br := bufio.NewReader(bytes.NewReader(raw))
	var resps []*http.Response
	var bodies [][]byte
	for {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return resps, bodies
		}
		var b []byte
		if resp.StatusCode >= 200 {
			b, _ = io.ReadAll(resp.Body)
		}
		resps = append(resps, resp)
		bodies = append(bodies, b)
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			rest, _ := io.ReadAll(br)
			if len(rest) > 0 {
				bodies[len(bodies)-1] = append(b, rest...)
			}
			return resps, bodies
		}
	}
}
