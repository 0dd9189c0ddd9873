// Package audit records what every sandbox did and was refused, without secret values.
package audit

import "time"

// Event is one audit record. Field names are shared with span attributes and metrics.
// It never holds a secret value: credentials appear by name only.
type Event struct {
	Time       time.Time         `json:"time"`
	ID         string            `json:"id"`
	Kind       string            `json:"kind"` // "request", "connect", "sandbox.start", "sandbox.end"
	SandboxID  string            `json:"sandbox"`
	Labels     map[string]string `json:"labels,omitempty"`
	Method     string            `json:"method,omitempty"`
	Scheme     string            `json:"scheme,omitempty"`
	Host       string            `json:"host,omitempty"`
	Port       int               `json:"port,omitempty"`
	Path       string            `json:"path,omitempty"`
	Query      string            `json:"query,omitempty"` // values redacted
	Phase      string            `json:"phase,omitempty"`
	Decision   string            `json:"decision"` // allow, deny, approve, would_deny, error
	Rule       string            `json:"rule,omitempty"`
	Reason     string            `json:"reason,omitempty"`
	PolicyRev  string            `json:"policy_revision,omitempty"`
	Creds      []string          `json:"credentials,omitempty"`
	ApprovalID string            `json:"approval_id,omitempty"`
	Approver   string            `json:"approver,omitempty"`
	Status     int               `json:"status,omitempty"`
	BytesIn    int64             `json:"bytes_in,omitempty"`
	BytesOut   int64             `json:"bytes_out,omitempty"`
	DurationMS float64           `json:"duration_ms,omitempty"`
	TraceID    string            `json:"trace_id,omitempty"`
	SpanID     string            `json:"span_id,omitempty"`
	ErrorClass string            `json:"error_class,omitempty"`
}
