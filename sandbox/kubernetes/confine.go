package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// A NetworkPolicy is not in force the moment its pod starts: the network plugin programs it
// some time later, and until then the pod may be unconfined (kube-router, Calico and
// others document this window) or have no allowed peers yet. So every sandbox pod has an
// init container, of airlock's own image, that runs CheckConfinement from inside the pod's
// network namespace: the pod's own container, where commands are exec'd, starts only once
// the proxy answers and a destination the policy forbids does not, in the same round.

// Confinement check defaults.
const (
	// ConfinementProbeNone turns the forbidden-destination half of the check off (the proxy
	// must still answer), for clusters where the API server is reachable from every pod by
	// design; see Options.ConfinementProbe.
	ConfinementProbeNone = "none"
	// confinementContainer is the init container's name.
	confinementContainer = "confinement"
)

// CheckConfinement returns nil once, in one round, proxy (host:port) accepts a TCP
// connection and forbidden refuses one or does not answer within a second; an empty
// forbidden means the API server's address from the pod's environment
// (KUBERNETES_SERVICE_HOST and _PORT, which the kubelet sets in every pod), and
// ConfinementProbeNone skips that half. Rounds repeat until ctx ends; the error then says
// what the last round saw.
func CheckConfinement(ctx context.Context, proxy, forbidden string) error {
	if forbidden == "" {
		h, p := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if h == "" || p == "" {
			return errors.New("no destination to check the pod's NetworkPolicy with: KUBERNETES_SERVICE_HOST/PORT are not set; name one (sandbox.kubernetes.confinement_probe) or \"none\"")
		}
		forbidden = net.JoinHostPort(h, p)
	}
	if forbidden == ConfinementProbeNone {
		forbidden = ""
	}
	var last error
	for {
		last = confinementRound(ctx, proxy, forbidden)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the pod's network is not confined as its NetworkPolicy says: %w", last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func confinementRound(ctx context.Context, proxy, forbidden string) error {
	var d net.Dialer
	dial := func(addr string, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(proxy, 2*time.Second); err != nil {
		return fmt.Errorf("the proxy %s does not answer (its allow rule is not in force yet): %w", proxy, err)
	}
	if forbidden != "" {
		err := dial(forbidden, time.Second)
		if err == nil {
			return fmt.Errorf("%s, which the policy forbids, answers (the policy is not in force yet)", forbidden)
		}
		// A probe that is down fails the same way as a blocked one (red team): say how, so
		// that the init container's log shows what the check rests on.
		fmt.Fprintf(os.Stderr, "confinement-check: the proxy %s answers; %s does not: %v\n", proxy, forbidden, err)
	}
	return nil
}
