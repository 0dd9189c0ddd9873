package kubernetes

import (
	"context"
	"errors"
	"testing"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/kubernetes/kubetest"
)

// TestAdoptRemoves: a restarted airlock does not take a sandbox pod over (its credential
// was the dead airlock's): its pod, Secret and NetworkPolicy are removed and the error
// says why; a sandbox with nothing left is removed without complaint but the same answer.
func TestAdoptRemoves(t *testing.T) {
	c := fakeCluster(t)
	ctx := context.Background()
	before := newTestBackend(t, Options{Client: kubetest.Wrap(c), Tokens: &tokens{}, Execer: &execRecorder{}})
	if _, err := sandbox.New(ctx, sandbox.Options{ID: "sbx-crashed", Backend: before}); err != nil {
		t.Fatal(err)
	}
	if got := objectsLeft(t, c); len(got) != 3 {
		t.Fatalf("objects before the restart: %v", got)
	}
	after := newTestBackend(t, Options{Client: kubetest.Wrap(c), Tokens: &tokens{}, Execer: &execRecorder{}})
	for _, id := range []string{"sbx-crashed", "sbx-never"} {
		inst, err := after.Adopt(ctx, sandbox.Options{ID: id})
		if inst != nil || !errors.Is(err, ErrNotTakenOver) || err.Error() != ErrNotTakenOver.Error() {
			t.Errorf("Adopt(%s): %v %v, want ErrNotTakenOver alone", id, inst, err)
		}
	}
	if got := objectsLeft(t, c); len(got) != 0 {
		t.Errorf("left behind: %v", got)
	}
	if _, err := after.Adopt(ctx, sandbox.Options{ID: "Bad/ID"}); err == nil || errors.Is(err, ErrNotTakenOver) {
		t.Errorf("an invalid id: %v", err)
	}
}
