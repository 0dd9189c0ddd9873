// Package admin serves the admin HTTP API on its own listener, which is never reachable from
// a sandbox: health, readiness, metrics, policy status, sandboxes, issuing and revoking
// sandbox proxy credentials, and what other parts mount (approvals).
package admin

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/airlock-proxy/airlock/internal/bearer"
	"github.com/airlock-proxy/airlock/internal/jsonapi"
	"github.com/airlock-proxy/airlock/internal/redact"
)

// Check is one readiness check: nil when ready.
type Check func(ctx context.Context) error

// Options say what the admin API serves. A nil field is left out.
type Options struct {
	// Ready checks run for /readyz, by name.
	Ready map[string]Check
	// Metrics serves /metrics (Prometheus).
	Metrics http.Handler
	// PolicyStatus returns what /v1/policy shows.
	PolicyStatus func() any
	// Sandboxes returns what /v1/sandboxes shows.
	Sandboxes func() any
	// Credentials serves POST and DELETE /v1/sandboxes/{id}/token (issue and revoke a
	// sandbox's proxy credential) to holders of a token in Issuers.
	Credentials Credentials
	Issuers     *bearer.Set
	// Logger; nil discards.
	Logger *slog.Logger
	// Mount adds routes (approvals) to the router.
	Mount []func(chi.Router)
	// Hosts are the names, besides IP addresses and localhost, that requests may carry as
	// Host (admin.hosts, and the listen address's name): any other gets 421, which defeats
	// DNS rebinding from an operator's browser.
	Hosts []string
	// MaxBodyBytes bounds every request body (413 beyond); default DefaultMaxBodyBytes.
	MaxBodyBytes int64
}

// New returns the admin router.
func New(o Options) http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.Recoverer)
	r.Use(newHostGuard(o.Hosts).middleware)
	r.Use(refuseProxied)
	maxBody := o.MaxBodyBytes
	if maxBody <= 0 {
		maxBody = DefaultMaxBodyBytes
	}
	r.Use(limitBody(maxBody))
	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		jsonapi.Write(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	r.Get("/readyz", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), 3*time.Second)
		defer cancel()
		out := map[string]string{}
		status := http.StatusOK
		for name, check := range o.Ready {
			if err := check(ctx); err != nil {
				out[name] = redact.Text(err.Error())
				status = http.StatusServiceUnavailable
			} else {
				out[name] = "ok"
			}
		}
		jsonapi.Write(w, status, out)
	})
	if o.Metrics != nil {
		r.Handle("/metrics", o.Metrics)
	}
	if o.PolicyStatus != nil {
		r.Get("/v1/policy", func(w http.ResponseWriter, _ *http.Request) { jsonapi.Write(w, http.StatusOK, o.PolicyStatus()) })
	}
	if o.Sandboxes != nil {
		r.Get("/v1/sandboxes", func(w http.ResponseWriter, _ *http.Request) { jsonapi.Write(w, http.StatusOK, o.Sandboxes()) })
	}
	if o.Credentials != nil {
		log := o.Logger
		if log == nil {
			log = slog.New(slog.DiscardHandler)
		}
		tokenRoutes(r, o.Credentials, o.Issuers, log.With("component", "admin"))
	}
	for _, m := range o.Mount {
		m(r)
	}
	return r
}

// refuseProxied refuses requests that came through a proxy (they carry Proxy-Authorization
// or an absolute-form target): the admin API is for operators, never for sandboxes.
func refuseProxied(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Authorization") != "" || r.URL.IsAbs() || r.Method == http.MethodConnect {
			jsonapi.Error(w, http.StatusForbidden, "the admin API does not accept proxied requests")
			return
		}
		next.ServeHTTP(w, r)
	})
}
