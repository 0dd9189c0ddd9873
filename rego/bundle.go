package rego

import (
	"bytes"
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
)

// maxBundleBytes bounds a bundle read from a file or URL.
const maxBundleBytes = 64 << 20

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
	return strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "https://")
}

// readBundle parses (and, when configured, verifies) a bundle tarball.
func (e *Engine) readBundle(raw []byte, etag string) (*policySource, error) {
	vc, err := e.opts.BundleVerification.config()
	if err != nil {
		return nil, err
	}
	r := bundle.NewReader(bytes.NewReader(raw)).
		WithRegoVersion(ast.RegoV1).
		WithProcessAnnotations(true).
		WithSizeLimitBytes(maxBundleBytes).
		WithBundleEtag(etag).
		WithSkipBundleVerification(vc == nil)
	if vc != nil {
		r = r.WithBundleVerificationConfig(vc)
	}
	b, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("read bundle %s: %w", e.opts.Bundle, err)
	}
	return fromBundle(&b, raw, e.opts.Bundle)
}

// fetchBundleFile reads a bundle file.
func (e *Engine) fetchBundleFile() (*policySource, error) {
	f, err := os.Open(e.opts.Bundle)
	if err != nil {
		return nil, fmt.Errorf("read bundle: %w", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxBundleBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read bundle %s: %w", e.opts.Bundle, err)
	}
	if len(raw) > maxBundleBytes {
		return nil, fmt.Errorf("read bundle %s: larger than %d bytes", e.opts.Bundle, maxBundleBytes)
	}
	return e.readBundle(raw, "")
}

// fetchBundleURL downloads a bundle. It returns nil, nil when the server answers that the
// bundle has not changed since the last fetch (ETag). Callers hold reloadMu.
func (e *Engine) fetchBundleURL(ctx context.Context) (*policySource, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.opts.Bundle, nil)
	if err != nil {
		return nil, fmt.Errorf("fetch bundle: %w", err)
	}
	if e.etag != "" && e.cur.Load() != nil {
		req.Header.Set("If-None-Match", e.etag)
	}
	resp, err := e.opts.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch bundle: %w", err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotModified:
		return nil, nil
	default:
		return nil, fmt.Errorf("fetch bundle %s: server answered %s", e.opts.Bundle, resp.Status)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBundleBytes+1))
	if err != nil {
		return nil, fmt.Errorf("fetch bundle %s: %w", e.opts.Bundle, err)
	}
	if len(raw) > maxBundleBytes {
		return nil, fmt.Errorf("fetch bundle %s: larger than %d bytes", e.opts.Bundle, maxBundleBytes)
	}
	etag := resp.Header.Get("ETag")
	src, err := e.readBundle(raw, etag)
	// Remember the ETag even when the bundle is broken, so that polling does not fetch and
	// report the same broken bundle again and again.
	e.etag = etag
	return src, err
}
