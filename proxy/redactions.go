package proxy

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/internal/event"
)

// redactions counts, per sandbox and credential, how many times the scrubber redacted the
// credential in that sandbox's responses. Each redaction confirms that an upstream echoed
// the value whole; a sandbox that can choose what the upstream echoes can use that to test
// guesses at it, one request each. Past Limits.MaxRedactionsPerCredential the sandbox may no
// longer use the credential. The counts last as long as the proxy (one entry per sandbox
// and credential that was ever redacted).
type redactions struct {
	mu sync.Mutex
	n  map[redactionKey]int64
}

type redactionKey struct{ sandbox, credential string }

// add counts n redactions of a response carrying creds (each of them: the scrubber does not
// tell which value matched, and all were sent to the same upstream) and returns the
// credentials that reached max with it.
func (r *redactions) add(sandbox string, creds []string, n int64, max int) []string {
	if n <= 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[redactionKey]int64{}
	}
	var crossed []string
	for _, c := range creds {
		k := redactionKey{sandbox, c}
		before := r.n[k]
		r.n[k] = before + n
		if before < int64(max) && before+n >= int64(max) {
			crossed = append(crossed, c)
		}
	}
	return crossed
}

// withheld returns the first of creds the sandbox may no longer use, and its count.
func (r *redactions) withheld(sandbox string, creds []string, max int) (string, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range creds {
		if n := r.n[redactionKey{sandbox, c}]; n >= int64(max) {
			return c, n
		}
	}
	return "", 0
}

// redactionLimit refuses a request whose credential the sandbox may no longer use.
func (p *Proxy) redactionLimit(st *reqState) *refusal {
	c, n := p.redacted.withheld(st.id.ID, st.creds, p.opts.Limits.MaxRedactionsPerCredential)
	if c == "" {
		return nil
	}
	return &refusal{status: http.StatusForbidden, decision: event.DecisionDeny, rule: "limits.redactions", class: "redaction_limit",
		reason: fmt.Sprintf("airlock has redacted the credential %s from this sandbox's responses %d times (limit %d): an upstream that keeps echoing it could be used to test guesses at it, "+
			"so this sandbox may no longer use it; ask the operator (if the destination never echoes it, its rule should say \"reflects\": false)",
			c, n, p.opts.Limits.MaxRedactionsPerCredential)}
}

// countRedactions records the redactions of st's response on its event and against its
// credentials; a credential that reaches the limit gets an audit event of its own.
func (p *Proxy) countRedactions(ctx context.Context, st *reqState) {
	if st.scrub == nil {
		return
	}
	st.ev.Redactions = st.scrub.Redactions()
	max := p.opts.Limits.MaxRedactionsPerCredential
	for _, c := range p.redacted.add(st.id.ID, st.creds, st.ev.Redactions, max) {
		reason := fmt.Sprintf("the credential %s was redacted from this sandbox's responses %d or more times; further requests of this sandbox that need it are refused", c, max)
		p.log.Warn("credential withheld from a sandbox after repeated redactions", "sandbox", st.id.ID, "credential", c, "limit", max, "rule", st.ev.Rule, "host", st.ev.Host)
		if p.opts.Auditor == nil {
			continue
		}
		ev := audit.Event{Time: time.Now().UTC(), ID: audit.NewID(), RequestID: st.ev.RequestID, Kind: event.KindCredentialWithheld,
			SandboxID: st.id.ID, Labels: st.id.Labels, Host: st.ev.Host, Decision: event.DecisionDeny, Rule: "limits.redactions",
			Reason: reason, Creds: []string{c}, Redactions: st.ev.Redactions}
		if err := p.opts.Auditor.Record(ctx, &ev); err != nil {
			p.log.Error("audit record failed", "err", err, "sandbox", st.id.ID)
		}
	}
}
