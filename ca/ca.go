// Package ca is airlock's certificate authority: an ECDSA P-256 root kept on disk with 0600
// keys, and leaf certificates for intercepted hosts, cached per host.
package ca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

const (
	certFile = "ca.pem"
	keyFile  = "ca-key.pem"
	// leafLifetime is how long a leaf certificate is valid; leaves are re-issued before then.
	leafLifetime = 24 * time.Hour
	maxCached    = 10000
)

// CA signs leaf certificates for intercepted TLS connections.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// Init creates a CA in dir if none is there and returns it (created reports whether it was
// made now). The key file is written with mode 0600 and the directory with 0700.
func Init(dir string) (c *CA, created bool, err error) {
	if c, err := Load(dir); err == nil {
		return c, false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("create CA directory: %w", err)
	}
	certPEM, keyPEM, err := generate()
	if err != nil {
		return nil, false, err
	}
	if err := writeFileAtomic(filepath.Join(dir, keyFile), keyPEM, 0o600); err != nil {
		return nil, false, err
	}
	if err := writeFileAtomic(filepath.Join(dir, certFile), certPEM, 0o644); err != nil {
		return nil, false, err
	}
	c, err = Load(dir)
	return c, err == nil, err
}

// Load reads the CA from dir. It refuses a key file that others may read: readable by
// anyone at all, or by group or others when the process's own user owns it (a file
// written with the usual umask). A key owned by another user and readable by its group
// too is accepted: that is what a Kubernetes Secret volume with mode 0400 becomes under
// the pod's fsGroup (root's file, 0440, group fsGroup), and the rule airlock applies to
// its other secret files.
func Load(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, certFile))
	if err != nil {
		return nil, fmt.Errorf("load CA certificate: %w", err)
	}
	kp := filepath.Join(dir, keyFile)
	st, err := os.Stat(kp)
	if err != nil {
		return nil, fmt.Errorf("load CA key: %w", err)
	}
	if keyExposed(st) {
		return nil, fmt.Errorf("load CA key: %s has mode %o, want 0600 (chmod 600 %s; a secret volume with mode 0400 or 0440)", kp, st.Mode().Perm(), kp)
	}
	keyPEM, err := os.ReadFile(kp)
	if err != nil {
		return nil, fmt.Errorf("load CA key: %w", err)
	}
	return Parse(certPEM, keyPEM)
}

// keyExposed says whether a key file may be read by others than its owner (and, for a
// file of another user, its group).
func keyExposed(fi os.FileInfo) bool {
	mode := fi.Mode().Perm()
	if mode&0o026 != 0 { // readable by others, writable by group or others
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Uid == uint32(os.Geteuid()) && mode&0o070 != 0
}

// Parse builds a CA from PEM-encoded certificate and PKCS#8 or SEC1 EC key.
func Parse(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("parse CA: no CERTIFICATE block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("parse CA: certificate is not a CA")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("parse CA: no key block")
	}
	var key *ecdsa.PrivateKey
	switch kb.Type {
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse CA key: %w", err)
		}
		ek, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, errors.New("parse CA key: not an ECDSA key")
		}
		key = ek
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse CA key: %w", err)
		}
	default:
		return nil, fmt.Errorf("parse CA key: unexpected block %q", kb.Type)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("parse CA: key does not match certificate")
	}
	return &CA{cert: cert, certPEM: certPEM, key: key, leaves: map[string]*tls.Certificate{}}, nil
}

// New returns an ephemeral in-memory CA (for tests and one-shot runs).
func New() (*CA, error) {
	certPEM, keyPEM, err := generate()
	if err != nil {
		return nil, err
	}
	return Parse(certPEM, keyPEM)
}

// CertPEM returns the CA certificate in PEM form (what `airlock ca cert` prints).
func (c *CA) CertPEM() []byte { return append([]byte(nil), c.certPEM...) }

// Certificate returns the parsed CA certificate.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// Leaf returns a certificate for host (a DNS name or IP literal), cached per host until
// shortly before it expires.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	now := time.Now()
	c.mu.Lock()
	if l, ok := c.leaves[host]; ok && now.Add(time.Hour).Before(l.Leaf.NotAfter) {
		c.mu.Unlock()
		return l, nil
	}
	c.mu.Unlock()

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("leaf key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host, Organization: []string{"airlock"}},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("sign leaf for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key, Leaf: leaf}
	c.mu.Lock()
	if len(c.leaves) >= maxCached {
		clear(c.leaves)
	}
	c.leaves[host] = l
	c.mu.Unlock()
	return l, nil
}

func generate() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "airlock CA", Organization: []string{"airlock"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(5, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n
}

func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
