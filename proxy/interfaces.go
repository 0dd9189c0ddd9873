package proxy

import (
	"context"

	"github.com/airlock-proxy/airlock/approval"
	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/rego"
	"github.com/airlock-proxy/airlock/secrets"
)

// Decider answers the policy question for one input. *rego.Engine implements it.
// An error means "no decision" and the proxy denies (fail closed).
type Decider interface {
	Decide(ctx context.Context, in *rego.Input) (rego.Decision, error)
}

// CredentialSource attaches short-lived credentials to outbound requests; *secrets.Broker
// implements it. The returned scrubber (nil when nothing was injected) is applied to the
// upstream response so that no injected value reaches the sandbox. An error that has an
// `HTTPStatus() int` method is answered with that status, any other with 503.
type CredentialSource interface {
	Attach(ctx context.Context, r secrets.AttachRequest) (secrets.Scrubber, error)
}

// Approver holds a request until a person or service decides; *approval.Service implements
// it. An error means no decision could be had (store down): the request is refused.
type Approver interface {
	Hold(ctx context.Context, r approval.Request) (approval.Result, error)
}

// Auditor records one event per decision. An error refuses the request when the sink is
// configured to block.
type Auditor interface {
	Record(ctx context.Context, ev audit.Event) error
}

// An Auditor that also has `Healthy() error` (as *audit.Sink does) is asked before each
// request is let through: while it reports an error, requests are refused with 503
// (audit.unavailable), so nothing passes unaudited.
var _ interface{ Healthy() error } = (*audit.Sink)(nil)
