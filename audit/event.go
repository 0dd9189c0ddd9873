// Package audit records what every sandbox did and was refused, without secret values.
package audit

import (
	"time"

	"github.com/airlock-proxy/airlock/internal/event"
)

// Stage says which of a forwarded request's two records a line is. A request that airlock
// forwards (to an upstream, or as a tunnel) has a decision record, appended before anything
// is sent, and a completion record after, with the same RequestID. A request refused before
// anything was sent has one record, without a stage; so have lifecycle events and an
// intercepted CONNECT (which forwards nothing itself: each request inside it is recorded).
type Stage string

const (
	// StageDecision is appended before the request is forwarded: the policy's (or the
	// approver's) decision and what will be sent (credentials by name). Nothing is forwarded
	// unless this record was written.
	StageDecision Stage = "decision"
	// StageCompletion follows once the exchange ends: status, bytes, duration, and the error
	// class and rule when it failed (a dial refused by the guard, an upstream error). It
	// repeats the decision record's fields, so it alone says what was asked and what happened.
	StageCompletion Stage = "completion"
)

// Event is one audit record. Field names are shared with span attributes and metrics.
// It never holds a secret value: credentials appear by name only.
type Event struct {
	Time      time.Time `json:"time"`
	ID        string    `json:"id"`                   // unique per record
	RequestID string    `json:"request_id,omitempty"` // shared by a request's records
	Stage     Stage     `json:"stage,omitempty"`
	// Kind is request, connect, credential.withheld, refusals.suppressed, sandbox.start,
	// sandbox.run, sandbox.end or sandbox.exec (the event.Kind constants).
	Kind      event.Kind        `json:"kind"`
	SandboxID string            `json:"sandbox"`
	ExecID    string            `json:"exec_id,omitempty"` // the session command a request came from, or an exec event's own id
	Labels    map[string]string `json:"labels,omitempty"`
	Command   []string          `json:"command,omitempty"` // a session command's argv (sandbox.exec)
	Method    string            `json:"method,omitempty"`
	Scheme    string            `json:"scheme,omitempty"`
	Host      string            `json:"host,omitempty"`
	Port      int               `json:"port,omitempty"`
	Path      string            `json:"path,omitempty"`
	Query     string            `json:"query,omitempty"` // values redacted
	Phase     string            `json:"phase,omitempty"`
	// Decision is allow, deny, approve, approved, would_deny, error, tunnel or lifecycle
	// (the event.Decision constants, which say what each means).
	Decision   event.Decision `json:"decision"`
	Rule       string         `json:"rule,omitempty"`
	Reason     string         `json:"reason,omitempty"`
	PolicyRev  string         `json:"policy_revision,omitempty"`
	Creds      []string       `json:"credentials,omitempty"`
	ApprovalID string         `json:"approval_id,omitempty"`
	Approver   string         `json:"approver,omitempty"`
	Status     int            `json:"status,omitempty"`
	BytesIn    int64          `json:"bytes_in,omitempty"`
	BytesOut   int64          `json:"bytes_out,omitempty"`
	// Redactions is how many times the scrubber replaced an attached credential in the
	// response (status line, headers, body, trailers): the upstream echoed it whole.
	Redactions int64   `json:"redactions,omitempty"`
	DurationMS float64 `json:"duration_ms,omitempty"`
	TraceID    string  `json:"trace_id,omitempty"`
	SpanID     string  `json:"span_id,omitempty"`
	ErrorClass string  `json:"error_class,omitempty"`
	// Suppressed is, in an event.KindRefusalsSuppressed record, how many refusals it stands for.
	Suppressed int64 `json:"suppressed,omitempty"`
}
