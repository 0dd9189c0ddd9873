package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/airlock-proxy/airlock/internal/bearer"
	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/internal/jsonapi"
)

// Credentials issues and revokes per-sandbox proxy credentials; *proxy.Proxy implements
// it. An error with an `HTTPStatus() int` method is answered with that status (its text
// for a 4xx); any other error with 503.
type Credentials interface {
	IssueTokenFor(ctx context.Context, id identity.Identity, ttl time.Duration) (token string, expires time.Time, err error)
	RevokeToken(ctx context.Context, sandboxID string) error
}

// IssueRequest is the body of POST /v1/sandboxes/{id}/token (it may be empty).
type IssueRequest struct {
	Labels map[string]string `json:"labels,omitempty"`
	// TTL is the credential's lifetime as a Go duration ("2h"); empty or longer than the
	// proxy's proxy.token_ttl means that.
	TTL string `json:"ttl,omitempty"`
}

// IssueResponse is the answer: the credential for http://SANDBOX:TOKEN@proxy:3128.
type IssueResponse struct {
	Sandbox string    `json:"sandbox"`
	Token   string    `json:"token"`
	Expires time.Time `json:"expires,omitzero"`
}

// RevokeResponse is the answer of DELETE /v1/sandboxes/{id}/token.
type RevokeResponse struct {
	Sandbox string `json:"sandbox"`
	Revoked bool   `json:"revoked"`
}

// maxIssueBody bounds an issue request's body.
const maxIssueBody = 64 << 10

// tokenRoutes serves
//
//	POST   /v1/sandboxes/{id}/token   {"labels": {...}, "ttl": "2h"} → 201 IssueResponse
//	DELETE /v1/sandboxes/{id}/token   → 200 RevokeResponse
//
// to holders of an issuer token (Authorization: Bearer): none → 401, a wrong one → 403.
func tokenRoutes(r chi.Router, creds Credentials, issuers *bearer.Set, log *slog.Logger) {
	h := &tokenAPI{creds: creds, issuers: issuers, log: log}
	r.Group(func(r chi.Router) {
		r.Use(h.requireIssuer)
		r.Post("/v1/sandboxes/{id}/token", h.issue)
		r.Delete("/v1/sandboxes/{id}/token", h.revoke)
	})
}

type tokenAPI struct {
	creds   Credentials
	issuers *bearer.Set
	log     *slog.Logger
}

type issuerKey struct{}

// RequireIssuer admits only holders of an issuer token (Authorization: Bearer, one of
// proxy.issuers): none → 401, a wrong one → 403. The sandbox sessions API sits behind it.
func RequireIssuer(issuers *bearer.Set) func(http.Handler) http.Handler {
	return (&tokenAPI{issuers: issuers}).requireIssuer
}

func (h *tokenAPI) requireIssuer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok, err := bearer.FromRequest(r)
		switch {
		case err != nil:
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
			jsonapi.Error(w, http.StatusUnauthorized, err.Error())
			return
		case !ok:
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
			jsonapi.Error(w, http.StatusUnauthorized, "this API (sandbox credentials and sessions) needs an issuer token: Authorization: Bearer TOKEN, with TOKEN from one of proxy.issuers")
			return
		case h.issuers.Len() == 0:
			jsonapi.Error(w, http.StatusForbidden, "no credential issuers are configured (proxy.issuers), so no token may issue sandbox credentials or use sandbox sessions")
			return
		}
		name, ok := h.issuers.Authenticate(tok)
		if !ok {
			jsonapi.Error(w, http.StatusForbidden, "the bearer token is not the token of any of proxy.issuers")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), issuerKey{}, name)))
	})
}

// sandboxID is the {id} of the path, checked by the one rule for ids (400 otherwise):
// "SBX-A" is not another spelling of "sbx-a".
func sandboxID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := chi.URLParam(r, "id")
	if err := identity.CheckID(id); err != nil {
		jsonapi.Error(w, http.StatusBadRequest, err.Error())
		return "", false
	}
	return id, true
}

func (h *tokenAPI) issue(w http.ResponseWriter, r *http.Request) {
	id, ok := sandboxID(w, r)
	if !ok {
		return
	}
	var req IssueRequest
	if r.ContentLength != 0 {
		if ct := r.Header.Get("Content-Type"); ct != "" {
			if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
				jsonapi.Error(w, http.StatusUnsupportedMediaType, "send the request body as application/json")
				return
			}
		}
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxIssueBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				jsonapi.Error(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", maxIssueBody))
				return
			}
			jsonapi.Error(w, http.StatusBadRequest, "request body: want {\"labels\": {\"K\": \"V\"}, \"ttl\": \"2h\"}: "+err.Error())
			return
		}
	}
	var ttl time.Duration
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d <= 0 {
			jsonapi.Error(w, http.StatusBadRequest, fmt.Sprintf("ttl %q: want a positive duration such as 2h", req.TTL))
			return
		}
		ttl = d
	}
	tok, exp, err := h.creds.IssueTokenFor(r.Context(), identity.Identity{ID: id, Labels: req.Labels}, ttl)
	if err != nil {
		h.fail(w, r, "issue", id, err)
		return
	}
	h.log.Info("issued a sandbox proxy credential", "sandbox", id, "issuer", r.Context().Value(issuerKey{}), "expires", exp)
	jsonapi.Write(w, http.StatusCreated, IssueResponse{Sandbox: id, Token: tok, Expires: exp})
}

func (h *tokenAPI) revoke(w http.ResponseWriter, r *http.Request) {
	id, ok := sandboxID(w, r)
	if !ok {
		return
	}
	if err := h.creds.RevokeToken(r.Context(), id); err != nil {
		h.fail(w, r, "revoke", id, err)
		return
	}
	h.log.Info("revoked a sandbox's proxy credentials", "sandbox", id, "issuer", r.Context().Value(issuerKey{}))
	jsonapi.Write(w, http.StatusOK, RevokeResponse{Sandbox: id, Revoked: true})
}

// fail maps an error to its status in one place; server-side detail goes to the log only.
func (h *tokenAPI) fail(w http.ResponseWriter, r *http.Request, verb, id string, err error) {
	status := http.StatusServiceUnavailable
	var hs interface{ HTTPStatus() int }
	if errors.As(err, &hs) {
		status = hs.HTTPStatus()
	}
	if status >= 500 {
		h.log.Error("sandbox credential "+verb+" failed", "sandbox", id, "err", err)
		jsonapi.Error(w, status, "the proxy's revocation list (approval store) is unavailable; retry later")
		return
	}
	jsonapi.Error(w, status, err.Error())
}
