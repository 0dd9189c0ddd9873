package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/airlock-proxy/airlock/internal/jsonapi"
)

// Client talks to the approvals admin API (for `airlock approvals list|show|approve|deny`).
// Token is an approver's token; it is never printed (String and LogValue redact it).
type Client struct {
	BaseURL string       // e.g. "http://127.0.0.1:9090"
	Token   string       // approver token
	HTTP    *http.Client // nil: http.DefaultClient
}

// String describes the client without its token.
func (c Client) String() string {
	return fmt.Sprintf("approval.Client{BaseURL: %q, Token: [redacted]}", c.BaseURL)
}

// LogValue logs the client without its token.
func (c Client) LogValue() slog.Value {
	return slog.GroupValue(slog.String("base_url", c.BaseURL), slog.String("token", "[redacted]"))
}

// APIError is a non-2xx answer of the admin API. errors.Is(err, ErrNotFound) and
// errors.Is(err, ErrDecided) work on it.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("approvals API: %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// Is maps 404, 409 and 410 to ErrNotFound, ErrDecided and ErrBodyGone.
func (e *APIError) Is(target error) bool {
	return (target == ErrNotFound && e.Status == http.StatusNotFound) ||
		(target == ErrDecided && e.Status == http.StatusConflict) ||
		(target == ErrBodyGone && e.Status == http.StatusGone)
}

// List returns records in state ("" for all), newest first.
func (c *Client) List(ctx context.Context, state State) ([]Record, error) {
	p := "/v1/approvals"
	if state != "" {
		p += "?state=" + url.QueryEscape(string(state))
	}
	var out struct {
		Approvals []Record `json:"approvals"`
	}
	if err := c.do(ctx, http.MethodGet, p, nil, &out); err != nil {
		return nil, err
	}
	return out.Approvals, nil
}

// Get returns one record.
func (c *Client) Get(ctx context.Context, id string) (Record, error) {
	var r Record
	err := c.do(ctx, http.MethodGet, "/v1/approvals/"+url.PathEscape(id), nil, &r)
	return r, err
}

// Approve approves a pending record; the record is returned as decided.
func (c *Client) Approve(ctx context.Context, id, comment string) (Record, error) {
	return c.decide(ctx, id, "approve", comment)
}

// Deny denies a pending record; comment is shown to the agent.
func (c *Client) Deny(ctx context.Context, id, comment string) (Record, error) {
	return c.decide(ctx, id, "deny", comment)
}

// Cancel withdraws a pending record without approving or denying it; comment is shown to
// the agent.
func (c *Client) Cancel(ctx context.Context, id, comment string) (Record, error) {
	return c.decide(ctx, id, "cancel", comment)
}

// Body returns the exact body a record holds (ErrBodyGone when it is not kept).
func (c *Client) Body(ctx context.Context, id string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.BaseURL, "/")+"/v1/approvals/"+url.PathEscape(id)+"/body", nil)
	if err != nil {
		return nil, fmt.Errorf("approvals API: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("approvals API GET body of %s: %w", id, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxClientBody+1))
	if err != nil {
		return nil, fmt.Errorf("approvals API GET body of %s: %w", id, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		return nil, &APIError{Status: resp.StatusCode, Message: e.Error}
	}
	if len(b) > maxClientBody {
		return nil, fmt.Errorf("approvals API GET body of %s: larger than %d bytes", id, maxClientBody)
	}
	return b, nil
}

// maxClientBody bounds a body the client downloads.
const maxClientBody = 1 << 30

func (c *Client) decide(ctx context.Context, id, verb, comment string) (Record, error) {
	var r Record
	err := c.do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id)+"/"+verb,
		DecideRequest{Comment: comment}, &r)
	return r, err
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	err := jsonapi.Do(ctx, c.HTTP, c.BaseURL, c.Token, method, path, in, out, 16<<20)
	var se *jsonapi.StatusError
	if errors.As(err, &se) {
		return &APIError{Status: se.Status, Message: se.Message}
	}
	if err != nil {
		return fmt.Errorf("approvals API %s %s at %w", method, path, err)
	}
	return nil
}
