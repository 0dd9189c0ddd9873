package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"os"
	"path/filepath"
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
