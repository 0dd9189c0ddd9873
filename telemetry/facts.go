package telemetry

import (
	"log/slog"
	"time"

	"github.com/airlock-proxy/airlock/internal/event"
)

// RequestFacts is what the proxy knows about one request when it is done. Field names
// match audit.Event so the two are mapped one to one; like it, it holds no secret value
// (credentials by name, no headers, no query).
type RequestFacts struct {
	Kind       event.Kind // request or connect
	SandboxID  string
	ExecID     string // the session command the request came from, when known
	Method     string
	Scheme     string
	Host       string
	Port       int
	Path       string
	Phase      string
	Decision   event.Decision
	Rule       string
	Reason     string
	PolicyRev  string
	Creds      []string
	ApprovalID string
	Approver   string
	Status     int
	BytesIn    int64
	BytesOut   int64
	Redactions int64 // times the scrubber replaced an attached credential in the response
	Duration   time.Duration
	ErrorClass string // a short class such as "vault_unreachable", never an error text
}

// LogValue logs the facts as a group of the same fields.
func (f RequestFacts) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("sandbox", f.SandboxID), slog.String("method", f.Method),
		slog.String("host", f.Host), slog.Int("port", f.Port), slog.String("path", f.Path),
		slog.String("decision", string(f.Decision)), slog.String("rule", f.Rule), slog.Int("status", f.Status),
		slog.Float64("duration_ms", float64(f.Duration)/float64(time.Millisecond)),
	}
	if len(f.Creds) > 0 {
		attrs = append(attrs, slog.Any("credentials", f.Creds))
	}
	if f.ApprovalID != "" {
		attrs = append(attrs, slog.String("approval_id", f.ApprovalID))
	}
	if f.ErrorClass != "" {
		attrs = append(attrs, slog.String("error_class", f.ErrorClass))
	}
	return slog.GroupValue(attrs...)
}

// decisionLabel bounds the decision attribute to the known values: each event.Decision is
// its own label, no decision counts as a deny, and anything else is "other".
func decisionLabel(d event.Decision) string {
	switch d {
	case event.DecisionAllow, event.DecisionDeny, event.DecisionApprove, event.DecisionApproved,
		event.DecisionWouldDeny, event.DecisionError, event.DecisionTunnel, event.DecisionLifecycle:
		return string(d)
	case "":
		return string(event.DecisionDeny)
	}
	return "other"
}
