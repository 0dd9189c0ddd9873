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
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-proxy/airlock/internal/event"
	"github.com/airlock-proxy/airlock/internal/redact"
)

// maxBackoff caps the delay between notification attempts.
const maxBackoff = 30 * time.Second

// notify sends the webhook and asks the external service about rec, in the background,
// bounded by the Service's lifetime. Webhooks are limited per sandbox (a token bucket) and
// not repeated for a request identical to one of the same sandbox already waiting
// (duplicate); a suppressed webhook is logged and counted, and the approval still waits on
// the page and in the API.
func (s *Service) notify(rec Record, duplicate bool) {
	if s.cfg.Webhook != "" {
		ok, skipped, why := s.hooks.admit(rec.Sandbox, duplicate, s.now())
		if ok {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				if err := s.sendWebhook(s.ctx, rec, skipped); err != nil {
					s.log.Warn("approval webhook failed", "id", rec.ID, "err", err)
				}
			}()
		} else {
			s.log.Info("approval webhook suppressed", "id", rec.ID, "sandbox", rec.Sandbox, "why", why)
		}
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
	// Suppressed counts this sandbox's approvals held since its previous webhook that were
	// not announced (rate limit or duplicates); they wait on the page like any other.
	Suppressed int `json:"suppressed,omitempty"`
}

// SlackPayload is the webhook body with webhook_format: slack. Text is plain text with
// Slack's control characters escaped; Mrkdwn is false so nothing in it is formatting.
type SlackPayload struct {
	Text   string `json:"text"`
	Mrkdwn bool   `json:"mrkdwn"`
}

func (s *Service) sendWebhook(ctx context.Context, rec Record, suppressed int) error {
	var payload any = WebhookPayload{Event: "approval.pending", Approval: rec, PageURL: s.cfg.PageURL, Suppressed: suppressed}
	if s.cfg.WebhookFormat == "slack" {
		payload = SlackPayload{Text: slackText(rec, s.cfg.PageURL, suppressed)}
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encode webhook: %w", err)
	}
	_, err = s.post(ctx, s.cfg.Webhook, body, "")
	return err
}

// slackEscape makes s plain text for Slack: &, < and > are its only control characters
// (<!channel>, <@user>, <url|text>), and escaped they show as themselves.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// maxSlackURL bounds the URL quoted in a Slack message (the record has it whole).
const maxSlackURL = 500

func slackText(r Record, page string, suppressed int) string {
	u := r.URL
	if len(u) > maxSlackURL {
		u = strings.ToValidUTF8(u[:maxSlackURL], "") + "…"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "airlock: approval needed for %s %s from sandbox %s", slackEscape(r.Method), slackEscape(u), slackEscape(r.Sandbox))
	if r.Rule != "" {
		fmt.Fprintf(&b, " (rule %s)", slackEscape(r.Rule))
	}
	if r.Reason != "" {
		fmt.Fprintf(&b, ": %s", slackEscape(r.Reason))
	}
	fmt.Fprintf(&b, ". %d byte body, %d headers, id %s, expires %s.", r.BodySize, len(r.Headers), r.ID, r.Expires.Format(time.RFC3339))
	for _, c := range r.Calls {
		fmt.Fprintf(&b, "\nCall (%s): %s", slackEscape(c.Action), slackEscape(c.Summary()))
		if len(c.Arguments) > 0 {
			args := string(c.Arguments)
			if len(args) > maxShownArguments {
				args = strings.ToValidUTF8(args[:maxShownArguments], "") + "…"
			}
			fmt.Fprintf(&b, " arguments %s", slackEscape(args))
		}
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(&b, "\nWARNING: %s", slackEscape(w))
	}
	if suppressed > 0 {
		fmt.Fprintf(&b, "\n%d more held requests from this sandbox were not announced (webhook limit); see the page.", suppressed)
	}
	if page != "" {
		fmt.Fprintf(&b, "\nDecide at %s", slackEscape(page))
	}
	return b.String()
}

// hookLimit limits webhooks per sandbox with a token bucket: burst at once, then one per
// every. Its counters say how many were suppressed.
type hookLimit struct {
	burst   int
	every   time.Duration
	mu      sync.Mutex
	buckets map[string]*hookBucket
	// rate and dup count suppressed webhooks (limit reached; duplicate of a waiting request).
	rate, dup atomic.Int64
}

type hookBucket struct {
	tokens     float64
	last       time.Time
	suppressed int // since the last webhook that went out
}

// maxHookBuckets bounds the table; full buckets with nothing suppressed are dropped first.
const maxHookBuckets = 10000

func newHookLimit(burst int, every time.Duration) *hookLimit {
	return &hookLimit{burst: max(burst, 1), every: max(every, time.Millisecond), buckets: map[string]*hookBucket{}}
}

// admit decides whether sandbox's new approval is announced. When it is, skipped is how many
// of the sandbox's approvals were not announced since its previous webhook.
func (h *hookLimit) admit(sandbox string, duplicate bool, now time.Time) (ok bool, skipped int, why string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.buckets[sandbox]
	if b == nil {
		if len(h.buckets) >= maxHookBuckets {
			h.prune(now)
		}
		b = &hookBucket{tokens: float64(h.burst), last: now}
		h.buckets[sandbox] = b
	}
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(float64(h.burst), b.tokens+float64(el)/float64(h.every))
		b.last = now
	}
	switch {
	case duplicate:
		h.dup.Add(1)
		b.suppressed++
		return false, 0, "an identical request from this sandbox is already waiting"
	case b.tokens < 1:
		h.rate.Add(1)
		b.suppressed++
		return false, 0, "webhook limit for this sandbox reached"
	}
	b.tokens--
	skipped, b.suppressed = b.suppressed, 0
	return true, skipped, ""
}

func (h *hookLimit) prune(now time.Time) {
	for k, b := range h.buckets {
		if b.suppressed == 0 && b.tokens+float64(now.Sub(b.last))/float64(h.every) >= float64(h.burst) {
			delete(h.buckets, k)
		}
	}
}

// SuppressedWebhooks counts webhooks not sent since start: because the sandbox's webhook
// limit was reached, and because an identical request of the sandbox was already waiting.
func (s *Service) SuppressedWebhooks() (limited, duplicates int64) {
	return s.hooks.rate.Load(), s.hooks.dup.Load()
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
	var state State
	switch a.Decision {
	case string(event.DecisionApprove), string(StateApproved):
		state = StateApproved
	case string(event.DecisionDeny), string(StateDenied):
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
	r := redact.URL(raw)
	if i := strings.Index(r, "://"); i >= 0 {
		if j := strings.IndexByte(r[i+3:], '/'); j >= 0 {
			return r[:i+3+j] + "/…"
		}
	}
	return r
}
