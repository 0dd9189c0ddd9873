package kubernetes

import (
	"context"
	"errors"

	"github.com/airlock-proxy/airlock/sandbox"
)

var _ sandbox.Adopter = (*Backend)(nil)

// ErrNotTakenOver: a sandbox pod is not taken over by a restarted airlock. Its proxy
// credential is in its pod's environment, fixed when the pod started and issued by the
// airlock that died, so no new one can reach it.
var ErrNotTakenOver = errors.New("a kubernetes sandbox is not taken over: the proxy credential in its pod's environment was its old airlock's")

// Adopt removes what an earlier airlock process left of sandbox o.ID (its pod, Secret and
// NetworkPolicy, the policy last) and returns ErrNotTakenOver with any error of the
// removal: the session of a crashed airlock ends, and nothing of it is left in the cluster.
func (b *Backend) Adopt(ctx context.Context, o sandbox.Options) (sandbox.Instance, error) {
	if err := checkID(o.ID); err != nil {
		return nil, err
	}
	in := &instance{b: b, opts: o, name: objectName(o.ID), made: map[string]bool{}}
	for _, kind := range kinds {
		in.made[kind] = true
	}
	return nil, errors.Join(ErrNotTakenOver, in.Close(ctx))
}
