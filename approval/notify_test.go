package approval

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is an httptest handler that fails the first `fail` requests with 503.
type recorder struct {
	mu     sync.Mutex
	fail   int
	bodies []string
	auth   []string
	answer func(w http.ResponseWriter, body []byte)
	got    chan struct{}
}

func newRecorder(fail int) *recorder { return &recorder{fail: fail, got: make(chan struct{}, 16)} }

func (h *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	h.bodies = append(h.bodies, string(b))
	h.auth = append(h.auth, r.Header.Get("Authorization"))
	n := len(h.bodies)
	h.mu.Unlock()
	if n <= h.fail {
		http.Error(w, "try later", http.StatusServiceUnavailable)
		return
	}
	if h.answer != nil {
		h.answer(w, b)
	}
	h.got <- struct{}{}
}

func (h *recorder) wait(t *testing.T) []string {
	t.Helper()
	select {
	case <-h.got:
	case <-time.After(30 * time.Second):
		t.Fatal("no successful delivery within 30s")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.bodies...)
}

// TestWebhookRetries: a webhook that fails twice gets the record on the third attempt.
func TestWebhookRetries(t *testing.T) {
	for _, format := range []string{"json", "slack"} {
		t.Run(format, func(t *testing.T) {
			hook := newRecorder(2)
			srv := httptest.NewServer(hook)
			t.Cleanup(srv.Close)
			s := newTestService(t, storeKinds()[0].dsn(t), Config{Webhook: srv.URL + "/hook", WebhookFormat: format})
			ev, cancel := s.Subscribe()
			defer cancel()
			held := holdAsync(context.Background(), s, sampleRequest(`{"hook":1}`))
			rec := nextCreated(t, ev)
			bodies := hook.wait(t)
			if len(bodies) != 3 {
				t.Errorf("webhook attempts: got %d, want 3 (two failures, then success)", len(bodies))
			}
			last := bodies[len(bodies)-1]
			switch format {
			case "json":
				var p WebhookPayload
				if err := json.Unmarshal([]byte(last), &p); err != nil {
					t.Fatalf("webhook body: %v", err)
				}
				if p.Event != "approval.pending" || p.Approval.ID != rec.ID || p.Approval.BodySHA256 != rec.BodySHA256 {
					t.Errorf("webhook payload: got %+v, want approval.pending for %s", p, rec.ID)
				}
			case "slack":
				var p map[string]string
				if err := json.Unmarshal([]byte(last), &p); err != nil {
					t.Fatalf("webhook body: %v", err)
				}
				if !strings.Contains(p["text"], rec.ID) || !strings.Contains(p["text"], "POST https://api.github.com/") {
					t.Errorf("slack text: got %q, want the id and request", p["text"])
				}
			}
			if strings.Contains(last, "s3cr3t") {
				t.Errorf("webhook carries the query secret: %s", last)
			}
			s.Decide(context.Background(), rec.ID, StateDenied, "oncall", "")
			waitHold(t, held)
		})
	}
}

// TestWebhookGivesUp: deliveries are bounded; the request still waits for a person.
func TestWebhookGivesUp(t *testing.T) {
	hook := newRecorder(1000)
	srv := httptest.NewServer(hook)
	t.Cleanup(srv.Close)
	s := newTestService(t, storeKinds()[0].dsn(t), Config{Webhook: srv.URL}, func(o *Options) { o.NotifyAttempts = 3 })
	ev, cancel := s.Subscribe()
	defer cancel()
	held := holdAsync(context.Background(), s, sampleRequest(`{}`))
	rec := nextCreated(t, ev)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		hook.mu.Lock()
		n := len(hook.bodies)
		hook.mu.Unlock()
		if n >= 3 || time.Now().After(deadline) {
			break
		}
	}
	if r, _ := s.Get(context.Background(), rec.ID); r.State != StatePending {
		t.Errorf("record after the webhook gave up: got %q, want still pending", r.State)
	}
	s.Close() // waits for the notifier, which has given up
	if h := waitHold(t, held); h.res.Approved() {
		t.Errorf("Hold: got %+v, want not approved", h.res)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if len(hook.bodies) != 3 {
		t.Errorf("attempts against a failing webhook: got %d, want 3", len(hook.bodies))
	}
}

// TestExternalService: the approval service answers at once, or later through the API.
func TestExternalService(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(w http.ResponseWriter, body []byte)
		state  string
		by     string
	}{
		{"synchronous approve", func(w http.ResponseWriter, body []byte) {
			var r Record
			json.Unmarshal(body, &r)
			json.NewEncoder(w).Encode(ServiceAnswer{Decision: "approve", By: "policy-bot", Comment: "hash " + r.BodySHA256[:8]})
		}, StateApproved, "policy-bot"},
		{"synchronous deny", func(w http.ResponseWriter, body []byte) {
			json.NewEncoder(w).Encode(ServiceAnswer{Decision: "deny", Comment: "no"})
		}, StateDenied, "approval-service"},
		{"accepted, decided later", func(w http.ResponseWriter, body []byte) {
			w.WriteHeader(http.StatusAccepted)
		}, StateApproved, "oncall"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := newRecorder(1)
			svc.answer = tc.answer
			srv := httptest.NewServer(svc)
			t.Cleanup(srv.Close)
			s := newTestService(t, storeKinds()[0].dsn(t), Config{Service: srv.URL})
			ev, cancel := s.Subscribe()
			defer cancel()
			held := holdAsync(context.Background(), s, sampleRequest(`{"svc":1}`))
			rec := nextCreated(t, ev)
			svc.wait(t)
			if tc.state == StateApproved && tc.by == "oncall" {
				if _, err := s.Decide(context.Background(), rec.ID, StateApproved, "oncall", ""); err != nil {
					t.Fatal(err)
				}
			}
			h := waitHold(t, held)
			if h.res.State != tc.state || h.res.DecidedBy != tc.by {
				t.Errorf("Hold: got %s by %s, want %s by %s", h.res.State, h.res.DecidedBy, tc.state, tc.by)
			}
		})
	}
}
