package rego

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/keys"

	"github.com/airlock-proxy/airlock/internal/redact"
)

// Bundle bounds (Options.MaxBundleBytes, Options.MaxBundleFiles). A bundle is read into
// memory and parsed, so what it expands to is bounded, not only the file: a few hundred KB
// of gzip can expand to gigabytes.
const (
	DefaultMaxBundleBytes = 64 << 20
	DefaultMaxBundleFiles = 10000
)

// ErrBundleTooLarge is returned for a bundle over Options.MaxBundleBytes (compressed,
// uncompressed or one file) or Options.MaxBundleFiles.
var ErrBundleTooLarge = errors.New("policy bundle too large")

// ErrInsecureBundleURL is returned for a bundle URL that is plain http:// while bundles
// need no signature and Options.AllowInsecureHTTP is not set.
var ErrInsecureBundleURL = errors.New("unsigned policy bundle over plain http")

// BundleVerification requires bundles to be signed (`opa build --signing-key`) and names the
// key that verifies them.
type BundleVerification struct {
	KeyID     string // key id in the signature; default "default"
	PublicKey string // PEM public key (or HMAC secret), or a path to a file holding it
	Algorithm string // default "RS256"
	Scope     string // optional scope the signature must carry
}

func (v *BundleVerification) config() (*bundle.VerificationConfig, error) {
	if v == nil {
		return nil, nil
	}
	if v.PublicKey == "" {
		return nil, errors.New("bundle verification: no public key")
	}
	id, alg := v.KeyID, v.Algorithm
	if id == "" {
		id = "default"
	}
	if alg == "" {
		alg = "RS256"
	}
	// A key in PEM form is used as is; anything else names a file. (OPA's keys.NewKeyConfig
	// stats the PEM text as a path first, which fails with ENAMETOOLONG whenever a run of
	// base64 between two '/' is longer than a file name may be.)
	key := v.PublicKey
	if !strings.Contains(key, "-----BEGIN") {
		b, err := os.ReadFile(key)
		switch {
		case err == nil:
			key = string(b)
		case strings.HasPrefix(alg, "HS"):
			// an HMAC secret given inline
		default:
			return nil, fmt.Errorf("bundle verification key: %w", err)
		}
	}
	kc := &keys.Config{Key: key, Algorithm: alg, Scope: v.Scope}
	return bundle.NewVerificationConfig(map[string]*bundle.KeyConfig{id: kc}, id, v.Scope, nil), nil
}

func isURL(s string) bool {
	s = strings.ToLower(s)
	return strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://")
}

// bundleName is the bundle's name for Status, logs and errors: a URL's userinfo, query and
// fragment are redacted (an access token there must not reach an unauthenticated reader).
func (e *Engine) bundleName() string { return redact.URL(e.opts.Bundle) }

// checkBundleTransport refuses what would let anyone on the network path replace the
// policy: an unsigned bundle over plain http, unless Options.AllowInsecureHTTP.
func (e *Engine) checkBundleTransport(url string) error {
	if !insecureBundleURL(url) || e.opts.BundleVerification != nil || e.opts.AllowInsecureHTTP {
		return nil
	}
	return fmt.Errorf("policy bundle %s: %w: anyone on the network path could replace the policy; "+
		"serve it over https, require signed bundles (policy_options.bundle_public_key), or accept the risk with policy_options.allow_insecure_http: true",
		redact.URL(url), ErrInsecureBundleURL)
}

func insecureBundleURL(url string) bool { return strings.HasPrefix(strings.ToLower(url), "http://") }

// bundleLimits bound what one bundle may expand to.
type bundleLimits struct {
	bytes int64 // the uncompressed tar stream, and so every file in it
	files int   // tar entries
}

func (e *Engine) bundleLimits() bundleLimits {
	return bundleLimits{bytes: e.opts.MaxBundleBytes, files: e.opts.MaxBundleFiles}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// scanBundle decompresses a bundle tarball the way OPA's reader does, keeping nothing,
// and stops with ErrBundleTooLarge as soon as the uncompressed stream passes lim.bytes,
// a file's header says it is larger, or the tarball holds more than lim.files entries.
// It returns how many uncompressed bytes it read (never more than lim.bytes+1). Run
// before OPA parses the bundle, it bounds the memory and time a bundle can cost.
func scanBundle(raw io.Reader, lim bundleLimits) (int64, error) {
	gz, err := gzip.NewReader(raw)
	if err != nil {
		return 0, fmt.Errorf("bundle is not a gzip file: %w", err)
	}
	defer gz.Close()
	cr := &countingReader{r: io.LimitReader(gz, lim.bytes+1)}
	over := func() error {
		return fmt.Errorf("%w: it expands to more than %d bytes (policy_options.max_bundle_bytes)", ErrBundleTooLarge, lim.bytes)
	}
	tr := tar.NewReader(cr)
	for files := 1; ; files++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if cr.n > lim.bytes {
			return cr.n, over()
		}
		if err != nil {
			return cr.n, fmt.Errorf("bundle tarball: %w", err)
		}
		if files > lim.files {
			return cr.n, fmt.Errorf("%w: more than %d files (policy_options.max_bundle_files)", ErrBundleTooLarge, lim.files)
		}
		if h.Size > lim.bytes {
			return cr.n, fmt.Errorf("%w: file %q is %d bytes, over %d (policy_options.max_bundle_bytes)", ErrBundleTooLarge, h.Name, h.Size, lim.bytes)
		}
		if _, err := io.Copy(io.Discard, tr); err != nil {
			if cr.n > lim.bytes {
				return cr.n, over()
			}
			return cr.n, fmt.Errorf("bundle tarball: %s: %w", h.Name, err)
		}
	}
	// Whatever follows the tarball is decompressed by the reader too.
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return cr.n, fmt.Errorf("bundle gzip stream: %w", err)
	}
	if cr.n > lim.bytes {
		return cr.n, over()
	}
	return cr.n, nil
}

// readBundle parses (and, when configured, verifies) a bundle tarball.
func (e *Engine) readBundle(raw []byte, etag string) (*policySource, error) {
	vc, err := e.opts.BundleVerification.config()
	if err != nil {
		return nil, err
	}
	lim := e.bundleLimits()
	if _, err := scanBundle(bytes.NewReader(raw), lim); err != nil {
		return nil, fmt.Errorf("read bundle %s: %w", e.bundleName(), err)
	}
	r := bundle.NewReader(bytes.NewReader(raw)).
		WithRegoVersion(ast.RegoV1).
		WithProcessAnnotations(true).
		WithSizeLimitBytes(lim.bytes).
		WithBundleEtag(etag).
		WithSkipBundleVerification(vc == nil)
	if vc != nil {
		r = r.WithBundleVerificationConfig(vc)
	}
	b, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("read bundle %s: %w", e.bundleName(), err)
	}
	return fromBundle(&b, raw, e.bundleName())
}

// fetchBundleFile reads a bundle file.
func (e *Engine) fetchBundleFile() (*policySource, error) {
	f, err := os.Open(e.opts.Bundle)
	if err != nil {
		return nil, fmt.Errorf("read bundle: %w", err)
	}
	defer f.Close()
	limit := e.opts.MaxBundleBytes
	raw, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read bundle %s: %w", e.opts.Bundle, err)
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("read bundle %s: %w: the file is larger than %d bytes (policy_options.max_bundle_bytes)", e.opts.Bundle, ErrBundleTooLarge, limit)
	}
	return e.readBundle(raw, "")
}

// fetchBundleURL downloads a bundle. It returns nil, nil when the server answers that the
// bundle has not changed since the last fetch (ETag). Callers hold reloadMu.
func (e *Engine) fetchBundleURL(ctx context.Context) (*policySource, error) {
	// Go's url.Error quotes the URL, token and all: every error here is redacted.
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.opts.Bundle, nil)
	if err != nil {
		return nil, redact.Error(fmt.Errorf("fetch bundle %s: %w", e.bundleName(), err))
	}
	if e.etag != "" && e.cur.Load() != nil {
		req.Header.Set("If-None-Match", e.etag)
	}
	resp, err := e.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, redact.Error(fmt.Errorf("fetch bundle %s: %w", e.bundleName(), err))
	}
	defer resp.Body.Close()
	if resp.Request != nil && resp.Request.URL != nil {
		// A redirect must not downgrade the transport either.
		if err := e.checkBundleTransport(resp.Request.URL.String()); err != nil {
			return nil, fmt.Errorf("fetch bundle %s: redirected: %w", e.bundleName(), err)
		}
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotModified:
		return nil, nil
	default:
		return nil, fmt.Errorf("fetch bundle %s: server answered %s", e.bundleName(), redact.Text(resp.Status))
	}
	limit := e.opts.MaxBundleBytes
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, redact.Error(fmt.Errorf("fetch bundle %s: %w", e.bundleName(), err))
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("fetch bundle %s: %w: larger than %d bytes (policy_options.max_bundle_bytes)", e.bundleName(), ErrBundleTooLarge, limit)
	}
	etag := resp.Header.Get("ETag")
	src, err := e.readBundle(raw, etag)
	// Remember the ETag even when the bundle is broken, so that polling does not fetch and
	// report the same broken bundle again and again.
	e.etag = etag
	return src, err
}
