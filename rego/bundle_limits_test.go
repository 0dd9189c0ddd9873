package rego

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// gzipped compresses b as one gzip member.
func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// tarHeader returns the 512-byte tar header of a regular file of size bytes.
func tarHeader(t testing.TB, name string, size int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := tar.NewWriter(&buf).WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// gzipBomb is a real gzip file (a series of members, as gzip(1) writes for concatenated
// input) of a tarball holding one data.json of expand bytes of zeros: about a thousandth of
// that compressed.
func gzipBomb(t testing.TB, expand int64) []byte {
	t.Helper()
	const chunk = 4 << 20
	zeros := gzipped(t, make([]byte, chunk))
	out := gzipped(t, tarHeader(t, "/data.json", expand))
	for n := int64(0); n < expand; n += chunk {
		out = append(out, zeros...)
	}
	return out
}

func TestBundleGzipBomb(t *testing.T) {
	const expand = 512 << 20
	bomb := gzipBomb(t, expand)
	if len(bomb) > 1<<20 {
		t.Fatalf("bomb is %d bytes compressed; want a few hundred KB", len(bomb))
	}

	// Reading stops at the bound: neither the uncompressed stream nor the compressed input
	// is read much past it.
	raw := &countingReader{r: bytes.NewReader(bomb)}
	n, err := scanBundle(raw, bundleLimits{bytes: DefaultMaxBundleBytes, files: DefaultMaxBundleFiles})
	if !errors.Is(err, ErrBundleTooLarge) {
		t.Fatalf("scanBundle error %v, want ErrBundleTooLarge", err)
	}
	if n > DefaultMaxBundleBytes+1 {
		t.Errorf("read %d uncompressed bytes, want at most the bound %d+1", n, DefaultMaxBundleBytes)
	}
	if raw.n > int64(len(bomb))/4 {
		t.Errorf("read %d of %d compressed bytes; want reading to stop near the bound (an eighth)", raw.n, len(bomb))
	}

	// Through New, from a file and from a URL, with a clear error.
	path := filepath.Join(t.TempDir(), "bomb.tar.gz")
	if err := os.WriteFile(path, bomb, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), Options{Bundle: path})
	if !errors.Is(err, ErrBundleTooLarge) || !strings.Contains(err.Error(), "max_bundle_bytes") {
		t.Errorf("New(bomb file) error %v, want ErrBundleTooLarge naming policy_options.max_bundle_bytes", err)
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(bomb) }))
	t.Cleanup(srv.Close)
	_, err = New(context.Background(), Options{Bundle: srv.URL + "/b.tar.gz", HTTPClient: srv.Client()})
	if !errors.Is(err, ErrBundleTooLarge) {
		t.Errorf("New(bomb URL) error %v, want ErrBundleTooLarge", err)
	}
}

func TestBundleBounds(t *testing.T) {
	// One gzip member of files each under a small configured bound, together over it.
	var several bytes.Buffer
	for i := range 4 {
		several.Write(tarHeader(t, fmt.Sprintf("/d%d/data.json", i), 512<<10))
		several.Write(make([]byte, 512<<10))
	}
	single := gzipped(t, several.Bytes())
	// A tarball of many empty files.
	var many bytes.Buffer
	tw := tar.NewWriter(&many)
	for i := range 101 {
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("/d%d/data.json", i), Mode: 0o644, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
	}
	_ = tw.Close()
	// A file whose header says it is larger than the bound (its bytes need not follow).
	bigHeader := gzipped(t, tarHeader(t, "/data.json", 2<<20))
	for _, tc := range []struct {
		name    string
		bundle  []byte
		o       Options
		wantMsg string
	}{
		{"uncompressed stream", single, Options{MaxBundleBytes: 1 << 20}, "expands to more than 1048576 bytes"},
		{"file count", gzipped(t, many.Bytes()), Options{MaxBundleFiles: 100}, "more than 100 files"},
		{"one file", bigHeader, Options{MaxBundleBytes: 1 << 20}, `file "/data.json" is 2097152 bytes`},
		{"compressed file", single, Options{MaxBundleBytes: int64(len(single)) - 1}, "the file is larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "b.tar.gz")
			if err := os.WriteFile(path, tc.bundle, 0o644); err != nil {
				t.Fatal(err)
			}
			tc.o.Bundle = path
			_, err := New(context.Background(), tc.o)
			if !errors.Is(err, ErrBundleTooLarge) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("New error %v, want ErrBundleTooLarge saying %q", err, tc.wantMsg)
			}
		})
	}
	// A bundle within the bounds still loads.
	path := filepath.Join(t.TempDir(), "ok.tar.gz")
	if err := os.WriteFile(path, makeBundle(t, "rev-ok", "b.ok", nil), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(context.Background(), Options{Bundle: path, MaxBundleBytes: 64 << 10, MaxBundleFiles: 4, Timeout: testEvalTimeout}); err != nil {
		t.Errorf("small bundle under small bounds: %v", err)
	}
}

// FuzzScanBundle: any bytes are refused or accepted without reading past the bound.
func FuzzScanBundle(f *testing.F) {
	f.Add(makeBundle(f, "rev-f", "f", nil))
	f.Add(gzipped(f, tarHeader(f, "/x", 1<<30)))
	f.Add([]byte("not gzip"))
	f.Fuzz(func(t *testing.T, b []byte) {
		lim := bundleLimits{bytes: 64 << 10, files: 8}
		n, _ := scanBundle(bytes.NewReader(b), lim)
		if n > lim.bytes+1 {
			t.Errorf("read %d bytes, bound %d", n, lim.bytes)
		}
	})
}

func TestBundleOverPlainHTTP(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	verify := &BundleVerification{KeyID: "airlock-test", PublicKey: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))}
	unsigned, signed := makeBundle(t, "rev-u", "b.u", nil), makeBundle(t, "rev-s", "b.s", key)

	var hits atomic.Int64
	serve := func(b []byte) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1); _, _ = w.Write(b) })
	}
	plainU := httptest.NewServer(serve(unsigned))
	plainS := httptest.NewServer(serve(signed))
	tlsU := httptest.NewTLSServer(serve(unsigned))
	downgrade := httptest.NewTLSServer(http.RedirectHandler(plainU.URL+"/b.tar.gz", http.StatusFound))
	for _, s := range []*httptest.Server{plainU, plainS, tlsU, downgrade} {
		t.Cleanup(s.Close)
	}
	for _, tc := range []struct {
		name     string
		o        Options
		refused  bool
		wantWarn bool
	}{
		{"unsigned over http", Options{Bundle: plainU.URL + "/b.tar.gz"}, true, false},
		{"unsigned over HTTP, upper case", Options{Bundle: strings.Replace(plainU.URL, "http://", "HTTP://", 1) + "/b.tar.gz?x=1"}, true, false},
		{"unsigned over http, opted in", Options{Bundle: plainU.URL + "/b.tar.gz", AllowInsecureHTTP: true}, false, true},
		{"signed over http", Options{Bundle: plainS.URL + "/b.tar.gz", BundleVerification: verify}, false, false},
		{"unsigned over https", Options{Bundle: tlsU.URL + "/b.tar.gz", HTTPClient: tlsU.Client()}, false, false},
		{"https redirected to http", Options{Bundle: downgrade.URL + "/b.tar.gz", HTTPClient: downgrade.Client()}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			tc.o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
			tc.o.Timeout = testEvalTimeout
			before := hits.Load()
			_, err := New(context.Background(), tc.o)
			switch {
			case tc.refused && !errors.Is(err, ErrInsecureBundleURL):
				t.Errorf("New error %v, want ErrInsecureBundleURL", err)
			case tc.refused && !strings.Contains(err.Error(), "allow_insecure_http"):
				t.Errorf("error %q does not say how to opt in", err)
			case !tc.refused && err != nil:
				t.Errorf("New: %v", err)
			}
			if tc.refused && tc.o.HTTPClient == nil && hits.Load() != before {
				t.Errorf("the refused http URL was fetched anyway")
			}
			if warned := strings.Contains(logs.String(), "allow_insecure_http"); warned != tc.wantWarn {
				t.Errorf("warning logged %v, want %v:\n%s", warned, tc.wantWarn, logs.String())
			}
		})
	}
}

// TestBundleURLSecretsRedacted: a bundle URL's userinfo and token never reach Status (the
// unauthenticated /v1/policy), a log line or an error, whether loading succeeds, a reload
// fails or the first fetch fails.
func TestBundleURLSecretsRedacted(t *testing.T) {
	const user, pass, tok = "CANARYUSER", "CANARYPASS", "CANARYTOKEN"
	var fail atomic.Bool
	bundle := makeBundle(t, "rev-1", "b.one", nil)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if fail.Load() {
			// A failure that makes Go's client return a *url.Error, which quotes the URL.
			panic(http.ErrAbortHandler)
		}
		_, _ = w.Write(bundle)
	}))
	srv.Config.ErrorLog = nil
	t.Cleanup(srv.Close)
	secretURL := strings.Replace(srv.URL, "https://", "https://"+user+":"+pass+"@", 1) + "/b.tar.gz?access_token=" + tok + "&sig=" + tok
	var logs bytes.Buffer
	o := Options{Bundle: secretURL, HTTPClient: srv.Client(), Logger: slog.New(slog.NewTextHandler(&logs, nil)), Timeout: testEvalTimeout, Poll: time.Hour}
	e, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	reloadErr := e.Reload(context.Background())
	if reloadErr == nil {
		t.Fatal("reload from a failing server succeeded")
	}
	_, newErr := New(context.Background(), o)
	if newErr == nil {
		t.Fatal("New from a failing server succeeded")
	}
	st := e.Status()
	for what, text := range map[string]string{
		"status source": st.Source, "status last error": st.LastError, "reload error": reloadErr.Error(),
		"New error": newErr.Error(), "log": logs.String(),
	} {
		for _, c := range []string{user, pass, tok} {
			if strings.Contains(text, c) {
				t.Errorf("%s holds %s: %s", what, c, text)
			}
		}
	}
	if !strings.Contains(st.Source, srv.Listener.Addr().String()+"/b.tar.gz") || st.LastError == "" {
		t.Errorf("status %+v: want the redacted URL still naming host and path, and the error", st)
	}
}
