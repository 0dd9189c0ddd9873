package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInitPersistsWith0600AndReloads(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	c1, created, err := Init(dir)
	if err != nil || !created {
		t.Fatalf("Init: created=%v err=%v", created, err)
	}
	st, err := os.Stat(filepath.Join(dir, keyFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != 0o600 {
		t.Errorf("key mode = %o, want 600", got)
	}
	k, ok := c1.cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || k.Curve != elliptic.P256() {
		t.Errorf("CA key is %T, want ECDSA P-256", c1.cert.PublicKey)
	}
	c2, created, err := Init(dir)
	if err != nil || created {
		t.Fatalf("second Init: created=%v err=%v, want existing CA", created, err)
	}
	if string(c1.CertPEM()) != string(c2.CertPEM()) {
		t.Error("second Init made a new CA instead of loading the existing one")
	}
}

func TestLoadRefusesReadableKey(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := Init(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, keyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil {
		t.Fatal("Load accepted a world-readable CA key")
	}
}

// TestLoadKeyModes: a key of airlock's own user must be 0600 (or 0400); one of another user
// may also be read by its group, as a Kubernetes Secret volume with mode 0400 makes it under
// the pod's fsGroup (root's file, 0440), never by others nor written by the group.
func TestLoadKeyModes(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := Init(dir); err != nil {
		t.Fatal(err)
	}
	kp := filepath.Join(dir, keyFile)
	other := -1
	if os.Geteuid() == 0 {
		other = 65532
	}
	for _, c := range []struct {
		owner int // -1: the process's own user
		mode  os.FileMode
		ok    bool
	}{
		{-1, 0o600, true}, {-1, 0o400, true}, {-1, 0o640, false}, {-1, 0o440, false}, {-1, 0o604, false},
		{other, 0o400, true}, {other, 0o440, true}, {other, 0o444, false}, {other, 0o460, false},
	} {
		if c.owner != -1 && other == -1 {
			continue // chown needs root
		}
		uid := c.owner
		if uid == -1 {
			uid = os.Geteuid()
		}
		if err := os.Chown(kp, uid, os.Getegid()); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(kp, c.mode); err != nil {
			t.Fatal(err)
		}
		_, err := Load(dir)
		if c.ok && err != nil {
			t.Errorf("owner %d mode %04o: %v, want the CA loaded", uid, c.mode, err)
		}
		if !c.ok && (err == nil || !strings.Contains(err.Error(), "want 0600")) {
			t.Errorf("owner %d mode %04o: %v, want the key refused", uid, c.mode, err)
		}
	}
}

func TestLeafVerifiesAgainstCAAndIsCached(t *testing.T) {
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(c.Certificate())
	for _, host := range []string{"example.com", "127.0.0.1", "::1"} {
		l, err := c.Leaf(host)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: pool}); err != nil {
			t.Errorf("leaf for %s does not verify: %v", host, err)
		}
		l2, _ := c.Leaf(host)
		if l2 != l {
			t.Errorf("leaf for %s was not cached", host)
		}
	}
	l, _ := c.Leaf("example.com")
	if _, err := l.Leaf.Verify(x509.VerifyOptions{DNSName: "other.com", Roots: pool}); err == nil {
		t.Error("leaf for example.com verified for other.com")
	}
}
