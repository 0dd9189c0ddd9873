//go:build e2e

package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/airlock-proxy/airlock/audit"
	"github.com/airlock-proxy/airlock/ca"
	"github.com/airlock-proxy/airlock/proxy"
	"github.com/airlock-proxy/airlock/sandbox"
	"github.com/airlock-proxy/airlock/sandbox/native"
	"github.com/airlock-proxy/airlock/testkit/e2etest"
)

// TestFullAuditDiskForwardsNothing: the audit log lives on a tiny tmpfs that is full except
// for the rest of the log's last page, so small records (refusals) still fit and large ones
// (a long URL) do not. curl in a real sandbox then sends large allowed requests, small
// denied ones in between, over plain HTTP and through an intercepted CONNECT: every large
// request is refused with 503 audit.unavailable and the upstream receives nothing. Once
// space is freed, the same request goes through, so the test would see a leak.
func TestFullAuditDiskForwardsNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (tmpfs mount, native sandbox)")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0700"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })

	logPath := filepath.Join(dir, "audit.jsonl")
	sink, err := audit.Open(audit.Options{Path: logPath, OnFailure: audit.OnFailureBlock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Close() })
	// Fill the log's first page to about 1000 bytes short of its end, then the disk.
	for size := fileSize(t, logPath); size < 4096-1300; size = fileSize(t, logPath) {
		ev := audit.Event{Kind: "test.padding", SandboxID: "padding", Decision: "lifecycle", Path: "/" + strings.Repeat("p", min(600, 4096-1300-int(size)))}
		if err := sink.Record(context.Background(), &ev); err != nil {
			t.Fatal(err)
		}
	}
	filler := fillDisk(t, dir)
	if err := sink.Record(context.Background(), &audit.Event{Kind: "test.padding", Path: "/" + strings.Repeat("p", 1500)}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("a large record on the full tmpfs: %v, want ENOSPC", err)
	}
	if err := sink.Record(context.Background(), &audit.Event{Kind: "test.padding"}); err != nil {
		t.Fatalf("a small record on the full tmpfs: %v, want it to fit in the last page", err)
	}

	var reached atomic.Int64
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	})
	up, pool := e2etest.TLSUpstream(t, "upstream.test", hello)
	plain := httptest.NewServer(hello)
	t.Cleanup(plain.Close)
	u, _ := url.Parse(up.URL)
	pu, _ := url.Parse(plain.URL)
	airlockCA, _ := ca.New()
	p, err := proxy.New(proxy.Options{
		Decider: e2etest.Engine(t, e2etest.UpstreamPolicy), CA: airlockCA, Auditor: sink, UpstreamCAs: pool,
		AllowPrivate: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Resolver:     e2etest.StaticResolver{netip.MustParseAddr("127.0.0.1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	sb, err := sandbox.New(context.Background(), sandbox.Options{Backend: &native.Native{}, ID: "sbx-audit-full", Proxy: p, CABundle: systemBundle(t, airlockCA.CertPEM())})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())

	long := "/allowed/" + strings.Repeat("a", 1500)
	curl := func(u string) string {
		out, _ := runIn(t, sb, "curl -sS -o /dev/null -w '%{http_code}' "+u+" 2>&1")
		return strings.TrimSpace(out)
	}
	viaTLS, viaHTTP := "https://upstream.test:"+u.Port(), "http://upstream.test:"+pu.Port()
	for i, target := range []string{
		viaTLS + long, // the first request (intercepted CONNECT, then the request)
		viaHTTP + long,
		viaHTTP + "/nope", // a small refusal that fits
		viaHTTP + long,
		viaTLS + long,
		viaHTTP + "/nope",
		viaHTTP + long,
	} {
		got := curl(target)
		if strings.HasSuffix(target, "/nope") {
			if got != "403" && got != "503" {
				t.Errorf("request %d (small refusal): %q, want 403 (or 503 once nothing fits)", i, got)
			}
			continue
		}
		if !strings.Contains(got, "503") {
			t.Errorf("request %d (large, allowed): %q, want 503 audit.unavailable", i, got)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("the upstream received %d request(s) while the audit log could not take them", n)
	}

	// Room again: the same request goes through, with its records.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if got := curl(viaTLS + long); got != "200" {
		t.Errorf("after freeing space: %q, want 200", got)
	}
	if n := reached.Load(); n != 1 {
		t.Errorf("after freeing space the upstream received %d requests, want 1", n)
	}
	p.Shutdown(context.Background())
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := audit.Verify([]string{logPath}, nil)
	if err != nil {
		t.Fatalf("the log after the full disk: %v", err)
	}
	if r.Unfinished != 0 {
		t.Errorf("%d decision record(s) without completion: %v", r.Unfinished, r.Warnings)
	}
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// fillDisk writes a file in dir until the file system is full and returns its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 512)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return p
		}
	}
}
