package approval

import (
	"context"
	"encoding/json"
	"fmt"
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
				var p SlackPayload
				if err := json.Unmarshal([]byte(last), &p); err != nil {
					t.Fatalf("webhook body: %v", err)
				}
				if !strings.Contains(p.Text, rec.ID) || !strings.Contains(p.Text, "POST https://api.github.com/") || p.Mrkdwn {
					t.Errorf("slack payload: got %+v, want the id and request, mrkdwn off", p)
				}
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
		state  State
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

// TestSlackTextEscapes: whatever the sandbox puts in its request (URL, header values that
// become warnings), a Slack message shows it as text: no <!channel>, <@user> or <url|text>
// control sequence survives, and & < > come out escaped.
func TestSlackTextEscapes(t *testing.T) {
	evil := []string{"<!channel>", "<!here|here>", "<@U123>", "<https://evil.example|click me>", "<!subteam^S1>", "&lt;!everyone&gt;", "a>b<c"}
	for _, e := range evil {
		rec := Record{ID: "apr-1", Method: "POST", Sandbox: "sbx-<!channel>", Rule: "r<x>", Reason: "why & <!here>",
			URL:      "https://h/p?q=" + e,
			Headers:  http.Header{"X-Http-Method-Override": {e}},
			Warnings: Warnings("POST", "https://h/p?_method="+e, http.Header{"X-Http-Method-Override": {e}}, nil)}
		text := slackText(rec, "https://page.example/approvals?a=1&b=2", 3)
		if strings.ContainsAny(text, "<>") {
			t.Errorf("%q: slack text keeps < or >: %q", e, text)
		}
		if strings.Contains(strings.ReplaceAll(strings.ReplaceAll(strings.ReplaceAll(text, "&amp;", ""), "&lt;", ""), "&gt;", ""), "&") {
			t.Errorf("%q: slack text has a bare &: %q", e, text)
		}
		if !strings.Contains(text, "WARNING: method override") || !strings.Contains(text, "3 more held requests") {
			t.Errorf("%q: slack text lacks the warnings or the suppressed count: %q", e, text)
		}
	}
}

// TestWebhookLimits: a sandbox that holds many requests at once gets its burst of webhooks
// and no more; identical requests are announced once; another sandbox still gets its own;
// every suppressed approval is counted, still waits and can be decided; the next webhook
// that goes out for the sandbox says how many were not announced.
func TestWebhookLimits(t *testing.T) {
	hook := newRecorder(0)
	hook.got = make(chan struct{}, 100)
	srv := httptest.NewServer(hook)
	t.Cleanup(srv.Close)
	now := time.Unix(1_800_000_000, 0)
	var clock sync.Mutex
	s := newTestService(t, storeKinds()[0].dsn(t), Config{Webhook: srv.URL, WebhookBurst: 3, WebhookInterval: Duration(time.Minute)},
		func(o *Options) {
			o.Now = func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
		})
	ev, cancel := s.Subscribe()
	defer cancel()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	var helds []<-chan holdResult
	var recs []Record
	hold := func(sandbox, body string) Record {
		r := sampleRequest(body)
		r.SandboxID = sandbox
		r.Timeout = time.Hour
		helds = append(helds, holdAsync(ctx, s, r))
		rec := nextCreated(t, ev)
		recs = append(recs, rec)
		return rec
	}
	for i := range 10 {
		hold("sbx-flood", fmt.Sprintf(`{"i":%d}`, i))
	}
	for range 3 {
		hold("sbx-flood", `{"same":true}`) // identical: one announcement at most
	}
	other := hold("sbx-quiet", `{"other":1}`)
	deliveries := func(want int) []string {
		t.Helper()
		for range want {
			hook.wait(t)
		}
		time.Sleep(50 * time.Millisecond) // let a wrong extra delivery show up
		hook.mu.Lock()
		defer hook.mu.Unlock()
		return append([]string(nil), hook.bodies...)
	}
	got := deliveries(4)
	if len(got) != 4 {
		t.Fatalf("webhooks: got %d, want 4 (a burst of 3 for sbx-flood, 1 for sbx-quiet)", len(got))
	}
	bySandbox := map[string]int{}
	for _, b := range got {
		var p WebhookPayload
		if err := json.Unmarshal([]byte(b), &p); err != nil {
			t.Fatal(err)
		}
		bySandbox[p.Approval.Sandbox]++
	}
	if bySandbox["sbx-flood"] != 3 || bySandbox["sbx-quiet"] != 1 {
		t.Errorf("webhooks by sandbox: got %v, want sbx-flood 3, sbx-quiet 1", bySandbox)
	}
	limited, dups := s.SuppressedWebhooks()
	if limited != 8 || dups != 2 {
		t.Errorf("suppressed: got %d limited, %d duplicates; want 8 and 2", limited, dups)
	}
	pending, err := s.List(context.Background(), ListFilter{State: StatePending})
	if err != nil || len(pending) != len(recs) {
		t.Fatalf("pending approvals: got %d, %v; want all %d (suppressed ones still wait)", len(pending), err, len(recs))
	}
	if _, err := s.Decide(context.Background(), other.ID, StateApproved, "oncall", ""); err != nil {
		t.Fatal(err)
	}

	// A minute later one more token: the next webhook reports the ten not announced.
	clock.Lock()
	now = now.Add(time.Minute)
	clock.Unlock()
	hold("sbx-flood", `{"later":true}`)
	got = deliveries(1)
	var p WebhookPayload
	if err := json.Unmarshal([]byte(got[len(got)-1]), &p); err != nil {
		t.Fatal(err)
	}
	if p.Approval.Sandbox != "sbx-flood" || p.Suppressed != 10 {
		t.Errorf("webhook after the refill: got sandbox %s suppressed %d, want sbx-flood and 10", p.Approval.Sandbox, p.Suppressed)
	}
	stop()
	for _, h := range helds {
		waitHold(t, h)
	}
}
