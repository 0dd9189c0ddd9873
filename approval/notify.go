package approval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// maxBackoff caps the delay between notification attempts.
const maxBackoff = 30 * time.Second

// notify sends the webhook and asks the external service about rec, in the background,
// bounded by the Service's lifetime.
func (s *Service) notify(rec Record) {
	if s.cfg.Webhook != "" {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.sendWebhook(s.ctx, rec); err != nil {
				s.log.Warn("approval webhook failed", "id", rec.ID, "err", err)
			}
		}()
	}
	if s.cfg.Service != "" {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.askService(s.ctx, rec); err != nil {
				s.log.Warn("approval service failed; the request waits for an approver", "id", rec.ID, "err", err)
			}
		}()
	}
}

// WebhookPayload is the JSON webhook body (webhook_format: json).
type WebhookPayload struct {
	Event    string `json:"event"` // "approval.pending"
	Approval Record `json:"approval"`
	PageURL  string `json:"page_url,omitempty"`
}

func (s *Service) sendWebhook(ctx context.Context, rec Record) error {
	var payload any = WebhookPayload{Event: "approval.pending", Approval: rec, PageURL: s.cfg.PageURL}
	if s.cfg.WebhookFormat == "slack" {
		payload = map[string]string{"text": slackText(rec, s.cfg.PageURL)}
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encode webhook: %w", err)
	}
	_, err = s.post(ctx, s.cfg.Webhook, body, "")
	return err
}

func slackText(r Record, page string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "airlock: approval needed for %s %s from sandbox %s", r.Method, r.URL, r.Sandbox)
	if r.Rule != "" {
		fmt.Fprintf(&b, " (rule %s)", r.Rule)
	}
	if r.Reason != "" {
		fmt.Fprintf(&b, ": %s", r.Reason)
	}
	fmt.Fprintf(&b, ". %d byte body, id %s, expires %s.", r.BodySize, r.ID, r.Expires.Format(time.RFC3339))
	if page != "" {
		fmt.Fprintf(&b, " Decide at %s", page)
	}
	return b.String()
}

// ServiceAnswer is what an external approval service answers to a posted Record. Status
// 202 (or an empty decision) means it decides later through the admin API.
type ServiceAnswer struct {
	Decision string `json:"decision"` // approve or deny
	By       string `json:"by"`
	Comment  string `json:"comment"`
}

func (s *Service) askService(ctx context.Context, rec Record) error {
	body, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode approval: %w", err)
	}
	resp, err := s.post(ctx, s.cfg.Service, body, string(s.serviceToken))
	if err != nil {
		return err
	}
	if resp.status == http.StatusAccepted || len(bytes.TrimSpace(resp.body)) == 0 {
		return nil
	}
	var a ServiceAnswer
	if err := json.Unmarshal(resp.body, &a); err != nil {
		return fmt.Errorf("approval service answer: %w", err)
	}
	state := ""
	switch a.Decision {
	case "approve", "approved":
		state = StateApproved
	case "deny", "denied":
		state = StateDenied
	case "":
		return nil
	default:
		return fmt.Errorf("approval service answer: decision must be approve or deny, got %q", a.Decision)
	}
	by := a.By
	if by == "" {
		by = "approval-service"
	}
	_, err = s.Decide(ctx, rec.ID, state, by, a.Comment)
	if errors.Is(err, ErrDecided) {
		return nil // someone else (or the timeout) was first
	}
	return err
}

type postResult struct {
	status int
	body   []byte
}

// post sends body with bounded retries and exponential backoff. 2xx is success; 4xx other
// than 408 and 429 is not retried.
func (s *Service) post(ctx context.Context, url string, body []byte, token string) (postResult, error) {
	delay := s.backoff
	var last error
	for attempt := 1; ; attempt++ {
		res, err := s.postOnce(ctx, url, body, token)
		if err == nil && res.status/100 == 2 {
			return res, nil
		}
		if err == nil {
			err = fmt.Errorf("status %d", res.status)
			if res.status/100 == 4 && res.status != 408 && res.status != 429 {
				return res, fmt.Errorf("post to %s: %w", redactURLForLog(url), err)
			}
		}
		last = err
		if attempt >= s.attempts {
			return postResult{}, fmt.Errorf("post to %s: gave up after %d attempts: %w", redactURLForLog(url), attempt, last)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return postResult{}, fmt.Errorf("post to %s: %w (last: %v)", redactURLForLog(url), ctx.Err(), last)
		case <-t.C:
		}
		delay = min(delay*2, maxBackoff)
	}
}

func (s *Service) postOnce(ctx context.Context, url string, body []byte, token string) (postResult, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return postResult{}, errors.New("build request") // the URL may carry a secret
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "airlock-approvals")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) {
			err = ue.Unwrap() // drop the URL that *url.Error prints
		}
		return postResult{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return postResult{}, fmt.Errorf("read answer: %w", err)
	}
	return postResult{status: resp.StatusCode, body: b}, nil
}

// redactURLForLog keeps scheme, host and path of a webhook address (Slack-style webhook
// URLs carry their secret in the path, so only the host is kept).
func redactURLForLog(raw string) string {
	r := RedactURL(raw)
	if i := strings.Index(r, "://"); i >= 0 {
		if j := strings.IndexByte(r[i+3:], '/'); j >= 0 {
			return r[:i+3+j] + "/…"
		}
	}
	return r
}
