package proxy

import (
	"context"
	"net/http"
	"time"

	"github.com/airlock-proxy/airlock/audit"
)

// Telemetry receives the facts the proxy records, for spans and metrics. The same
// audit.Event that goes to the audit sink ends each request, so both carry the same fields.
type Telemetry interface {
	ConnectionOpened()
	ConnectionClosed()
	// RequestStarted starts the request's span; end is called once with the final event.
	RequestStarted(ctx context.Context, r *http.Request) (_ context.Context, end func(ev *audit.Event))
	// PolicyEvaluated records one policy evaluation.
	PolicyEvaluated(ctx context.Context, d time.Duration, err error)
}

type noTelemetry struct{}

func (noTelemetry) ConnectionOpened() {}
func (noTelemetry) ConnectionClosed() {}
func (noTelemetry) RequestStarted(ctx context.Context, _ *http.Request) (context.Context, func(*audit.Event)) {
	return ctx, func(*audit.Event) {}
}
func (noTelemetry) PolicyEvaluated(context.Context, time.Duration, error) {}
