package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/airlock-proxy/airlock/internal/identity"
	"github.com/airlock-proxy/airlock/internal/jsonapi"
)

// Client issues and revokes sandbox proxy credentials through a proxy's admin API, for a
// sandbox backend whose proxy runs elsewhere (an in-cluster Deployment, a proxy
// container). It implements the TokenIssuer interfaces of sandbox/kubernetes and
// sandbox/docker. Token is an issuer token (proxy.issuers); it is never printed.
type Client struct {
	BaseURL string        // e.g. "http://airlock-admin.airlock.svc:9090"
	Token   string        // issuer token
	TTL     time.Duration // lifetime asked for; 0: the proxy's proxy.token_ttl
	HTTP    *http.Client  // nil: a client with a 30s timeout
}

// String describes the client without its token.
func (c *Client) String() string {
	return fmt.Sprintf("admin.Client{BaseURL: %q, Token: [redacted]}", c.BaseURL)
}

// LogValue logs the client without its token.
func (c *Client) LogValue() slog.Value {
	return slog.GroupValue(slog.String("base_url", c.BaseURL), slog.String("token", "[redacted]"))
}

// APIError is a non-2xx answer of the admin API.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("airlock admin API: %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// IssueToken asks the proxy for a credential for id.
func (c *Client) IssueToken(ctx context.Context, id identity.Identity) (string, error) {
	req := IssueRequest{Labels: id.Labels}
	if c.TTL > 0 {
		req.TTL = c.TTL.String()
	}
	var out IssueResponse
	if err := c.do(ctx, http.MethodPost, "/v1/sandboxes/"+url.PathEscape(id.ID)+"/token", req, &out); err != nil {
		return "", fmt.Errorf("issue proxy credential for %s: %w", id.ID, err)
	}
	if out.Token == "" {
		return "", fmt.Errorf("issue proxy credential for %s: the admin API answered without a token", id.ID)
	}
	return out.Token, nil
}

// RevokeToken revokes every credential of the sandbox.
func (c *Client) RevokeToken(ctx context.Context, sandboxID string) error {
	var out RevokeResponse
	if err := c.do(ctx, http.MethodDelete, "/v1/sandboxes/"+url.PathEscape(sandboxID)+"/token", nil, &out); err != nil {
		return fmt.Errorf("revoke proxy credential of %s: %w", sandboxID, err)
	}
	if !out.Revoked {
		return fmt.Errorf("revoke proxy credential of %s: the admin API did not confirm it", sandboxID)
	}
	return nil
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	err := jsonapi.Do(ctx, hc, c.BaseURL, c.Token, method, path, in, out, 1<<20)
	var se *jsonapi.StatusError
	if errors.As(err, &se) {
		return &APIError{Status: se.Status, Message: se.Message}
	}
	if err != nil {
		return fmt.Errorf("airlock admin API at %w", err)
	}
	return nil
}
