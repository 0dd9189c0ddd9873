// Package event names the values airlock writes into its records: what kind of event a
// record is, what was decided and where a held request's approval stands. They are
// declared once, here, and audit, telemetry, approval, proxy, session, sandbox and
// cmd/airlock all use these constants; the JSON, log and metric forms are the strings
// below.
package event

// Kind is what an audit record is about.
type Kind string

const (
	// KindRequest is one HTTP request through the proxy (also one refused before its
	// destination was known, such as a request without a valid proxy credential).
	KindRequest Kind = "request"
	// KindConnect is one CONNECT: intercepted (each request inside it is recorded itself),
	// tunnelled (bytes pass uninspected) or refused.
	KindConnect Kind = "connect"
	// KindCredentialWithheld records that a credential was redacted from a sandbox's
	// responses as often as allowed (limits.redactions): the sandbox's further requests
	// that need it are refused.
	KindCredentialWithheld Kind = "credential.withheld"
	// KindRefusalsSuppressed stands for refusals that were counted instead of written one by
	// one (a refusal flood); its Suppressed field says how many.
	KindRefusalsSuppressed Kind = "refusals.suppressed"
	// KindCheckpoint is a signed checkpoint line of the hash chain, not an Event.
	KindCheckpoint Kind = "checkpoint"

	// The lifecycle of a sandbox: created, its command started, ended; and one command run
	// in a session's sandbox.
	KindSandboxStart Kind = "sandbox.start"
	KindSandboxRun   Kind = "sandbox.run"
	KindSandboxEnd   Kind = "sandbox.end"
	KindSandboxExec  Kind = "sandbox.exec"
)

// Decision is what became of a request, a CONNECT or a command, as recorded. The zero
// value is no decision: telemetry counts it as a deny.
type Decision string

const (
	// DecisionAllow: the policy allowed it (an allowed CONNECT is intercepted).
	DecisionAllow Decision = "allow"
	// DecisionDeny: refused by the policy or by a limit, guard or protocol rule.
	DecisionDeny Decision = "deny"
	// DecisionApprove: the policy asked for an approval; the record's approver and status
	// say how it ended.
	DecisionApprove Decision = "approve"
	// DecisionApproved: a session command that was held and then approved (and the run
	// report's count of held requests that were approved).
	DecisionApproved Decision = "approved"
	// DecisionWouldDeny: the policy denied it but airlock runs report-only, so it passed.
	DecisionWouldDeny Decision = "would_deny"
	// DecisionError: refused because something failed (policy, credential store, approval
	// store, audit log, upstream) or the request was malformed; fail closed.
	DecisionError Decision = "error"
	// DecisionTunnel: a CONNECT the policy let through as a raw tunnel, uninspected.
	DecisionTunnel Decision = "tunnel"
	// DecisionLifecycle: a sandbox lifecycle record (start, run, end), which decides nothing.
	DecisionLifecycle Decision = "lifecycle"
)

// Decisions returns every Decision airlock writes, in the order above.
func Decisions() []Decision {
	return []Decision{DecisionAllow, DecisionDeny, DecisionApprove, DecisionApproved,
		DecisionWouldDeny, DecisionError, DecisionTunnel, DecisionLifecycle}
}

// Refused reports whether d turned the request away (deny or error).
func (d Decision) Refused() bool { return d == DecisionDeny || d == DecisionError }
