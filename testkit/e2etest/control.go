package e2etest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-proxy/airlock/approval"
)

// HostControl runs an escape attempt's script on the host and fails the test unless it
// gets through there (prints ESCAPED): an attempt that fails on the host as well proves
// nothing about the sandbox.
func HostControl(t testing.TB, script string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.WaitDelay = time.Second
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "ESCAPED") && Rootless() {
		// The control runs as the unprivileged test user: what only root could do on the
		// host is proven by the same suite's root run.
		t.Logf("control (as an unprivileged user) does not get through on the host: %q", out)
	} else if !strings.Contains(string(out), "ESCAPED") {
		t.Errorf("control: the attempt does not get through on the host either (out %q), so it proves nothing", out)
	}
}

// Approvals starts an approval service with its SQLite store in dir and one approver,
// "tester"; it is closed at cleanup.
func Approvals(t testing.TB, dir string) *approval.Service {
	t.Helper()
	tok := filepath.Join(dir, "approver.token")
	if err := os.WriteFile(tok, []byte("e2e-approver-token-0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	svc, err := approval.New(context.Background(), approval.Options{Config: approval.Config{
		Store:     approval.DefaultStore(dir),
		Approvers: []approval.ApproverConfig{{Name: "tester", TokenFile: tok}},
	}, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc
}

// Pending waits up to a minute for svc to hold exactly one pending request.
func Pending(t testing.TB, svc *approval.Service) approval.Record {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		recs, err := svc.List(context.Background(), approval.ListFilter{State: approval.StatePending})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) == 1 {
			return recs[0]
		}
	}
	t.Fatal("no pending approval appeared")
	return approval.Record{}
}

// PendingOf waits up to 90 seconds until sandbox id has exactly n pending requests in svc
// and returns them.
func PendingOf(t testing.TB, svc *approval.Service, id string, n int) []approval.Record {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		recs, err := svc.List(context.Background(), approval.ListFilter{State: approval.StatePending})
		if err != nil {
			t.Fatal(err)
		}
		var mine []approval.Record
		for _, r := range recs {
			if r.Sandbox == id {
				mine = append(mine, r)
			}
		}
		if len(mine) == n {
			return mine
		}
		if time.Now().After(deadline) {
			t.Fatalf("pending approvals of %s: got %d, want %d", id, len(mine), n)
		}
	}
}
