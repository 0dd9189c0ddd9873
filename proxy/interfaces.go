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

// credentialCatalog is a CredentialSource that says which credentials its config defines
// (*secrets.Broker); a rule's optional credentials are left out when it does not.
type credentialCatalog interface {
	Configured(name string) bool
}

// configuredCredentials are the names of creds that the credential source defines, for a
// decision with credential_optional: the others are not configured at all, and the request
// goes without them (anonymously). A source that cannot say keeps them all, so that an
// attach failure refuses the request as it would without the option.
func (p *Proxy) configuredCredentials(creds []string) []string {
	if p.opts.Credentials == nil {
		return nil
	}
	cat, ok := p.opts.Credentials.(credentialCatalog)
	if !ok {
		return creds
	}
	var out []string
	for _, c := range creds {
		if cat.Configured(c) {
			out = append(out, c)
		}
	}
	return out
}

// Approver holds a request until a person or service decides; *approval.Service implements
// it. An error means no decision could be had (store down): the request is refused.
type Approver interface {
	Hold(ctx context.Context, r approval.Request) (approval.Result, error)
}

// ExecCredentials attributes the requests of a sandbox session's commands: each command
// runs with HTTP_PROXY naming its own exec credential (http://EXEC:SECRET@127.0.0.1:3128),
// and a request that presents it on its sandbox's own listener is recorded with that exec
// id. It is attribution within one sandbox, not authentication: the listener already is.
// A credential that names no command of the sandbox is treated as any other proxy
// credential.
type ExecCredentials interface {
	// ExecOf returns the exec id that user and secret name for a request on sandboxID's
	// own listener; false when they name none.
	ExecOf(sandboxID, user, secret string) (execID string, ok bool)
}

// Auditor records audit events: a forwarded request's decision (before it is sent) and its
// completion, and each refusal (see record.go). Record returns once the event is recorded
// as the sink promises (*audit.Sink: written to its file); an error for a decision record
// refuses the request with 503 (audit.unavailable), so nothing passes unaudited.
type Auditor interface {
	Record(ctx context.Context, ev *audit.Event) error
}

var _ Auditor = (*audit.Sink)(nil)
