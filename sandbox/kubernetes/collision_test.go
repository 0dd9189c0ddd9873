package kubernetes

import (
	"context"
	"errors"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/kubernetes/kubetest"
)

// TestCreateWithLiveIDLeavesItAlone: a second Create with the id of a live sandbox
// (another airlock sharing the namespace) fails with sandbox.ErrExists, issues no
// credential (which would replace the live one's) and deletes nothing: the live sandbox
// keeps its pod, Secret, NetworkPolicy and credential and still runs commands. Also when
// its objects appear between the check and the create. Before the fix the failed Create
// deleted the live sandbox's objects and revoked its credential.
func TestCreateWithLiveIDLeavesItAlone(t *testing.T) {
	for _, raced := range []bool{false, true} {
		t.Run(map[bool]string{false: "seen", true: "created since the check"}[raced], func(t *testing.T) {
			c := fakeCluster(t)
			tok := &tokens{}
			ex := &execRecorder{out: "alive\n"}
			b := newTestBackend(t, Options{Client: kubetest.Wrap(c), Tokens: tok, Execer: ex})
			ctx := context.Background()
			live, err := sandbox.New(ctx, sandbox.Options{ID: "sbx-live", Backend: b})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = live.Close(context.Background()) })
			want := objectsLeft(t, c)
			issued := tok.issued
			if raced { // the check finds nothing: the objects come between it and the create
				c.PrependReactor("get", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
					if a.GetResource().Resource == "services" {
						return false, nil, nil
					}
					return true, nil, apierrors.NewNotFound(schema.GroupResource{Resource: a.GetResource().Resource}, "airlock-sbx-live")
				})
			}

			_, err = sandbox.New(ctx, sandbox.Options{ID: "sbx-live", Backend: b})
			if !errors.Is(err, sandbox.ErrExists) {
				t.Errorf("second create: %v, want sandbox.ErrExists", err)
			}
			if got := objectsLeft(t, c); !slices.Equal(got, want) {
				t.Errorf("objects after the failed create: %v, want the live sandbox's %v", got, want)
			}
			if !tok.live["sbx-live"] {
				t.Errorf("the live sandbox's credential was revoked")
			}
			if !raced && tok.issued != issued {
				t.Errorf("credentials issued %d, want %d: a new one replaces the live sandbox's", tok.issued, issued)
			}
			res, err := live.Run(ctx, sandbox.Command{Args: []string{"echo", "alive"}})
			if err != nil || string(res.Stdout) != "alive\n" {
				t.Errorf("the live sandbox after the collision: %q, %v", res.Stdout, err)
			}
		})
	}
}
