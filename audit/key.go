package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// checkpointDomain separates checkpoint signatures from any other use of the key; its
// version suffix is the checkpoint's "v" (1 when absent).
const checkpointDomain = "airlock-audit-checkpoint-v"

// checkpointMessage is what a checkpoint's signature covers: its own sequence number and
// the hash of the line before it, which by the chain commits to every earlier line, and
// from version 2 on its time and whether it is final (seals the file).
func checkpointMessage(c checkpointLine) []byte {
	if c.V < 2 {
		return []byte(checkpointDomain + "1\n" + strconv.FormatUint(c.Seq, 10) + "\n" + c.Hash + "\n")
	}
	final := "0"
	if c.Final {
		final = "1"
	}
	return []byte(checkpointDomain + strconv.Itoa(c.V) + "\n" + strconv.FormatUint(c.Seq, 10) + "\n" + c.Hash + "\n" +
		c.Time + "\n" + final + "\n")
}

// KeyID names a public key in checkpoint lines: the first 8 bytes of its SHA-256, in hex.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// LoadSigningKey reads an Ed25519 private key: a PEM "PRIVATE KEY" (PKCS#8), or a 32-byte
// seed / 64-byte private key as raw bytes, hex or base64.
func LoadSigningKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read audit signing key: %w", err)
	}
	if blk, _ := pem.Decode(b); blk != nil {
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse audit signing key %s: %w", path, err)
		}
		priv, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("audit signing key %s: want an Ed25519 key, got %T", path, k)
		}
		return priv, nil
	}
	raw := decodeKeyBytes(b)
	switch len(raw) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case ed25519.PrivateKeySize:
		return ed25519.PrivateKey(raw), nil
	}
	return nil, fmt.Errorf("audit signing key %s: want PKCS#8 PEM or a 32-byte Ed25519 seed (raw, hex or base64)", path)
}

// LoadPublicKey reads an Ed25519 public key: a PEM "PUBLIC KEY" (PKIX), 32 raw bytes, hex
// or base64. A private key file is accepted too, and its public half used.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read audit public key: %w", err)
	}
	if blk, _ := pem.Decode(b); blk != nil && blk.Type == "PUBLIC KEY" {
		k, err := x509.ParsePKIXPublicKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse audit public key %s: %w", path, err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("audit public key %s: want an Ed25519 key, got %T", path, k)
		}
		return pub, nil
	}
	if raw := decodeKeyBytes(b); len(raw) == ed25519.PublicKeySize {
		return ed25519.PublicKey(raw), nil
	}
	priv, err := LoadSigningKey(path)
	if err != nil {
		return nil, fmt.Errorf("audit public key %s: not a PEM public key, 32-byte key or private key", path)
	}
	return priv.Public().(ed25519.PublicKey), nil
}

func decodeKeyBytes(b []byte) []byte {
	t := bytes.TrimSpace(b)
	if h, err := hex.DecodeString(string(t)); err == nil && keyLen(len(h)) {
		return h
	}
	if d, err := base64.StdEncoding.DecodeString(string(t)); err == nil && keyLen(len(d)) {
		return d
	}
	return b
}

func keyLen(n int) bool {
	return n == ed25519.SeedSize || n == ed25519.PrivateKeySize
}

// GenerateSigningKey writes a new Ed25519 key pair as PEM: the private key (PKCS#8, mode
// 0600) to privPath and the public key (PKIX) to pubPath. It refuses to overwrite.
func GenerateSigningKey(privPath, pubPath string) error {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("generate audit key: %w", err)
	}
	p8, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return fmt.Errorf("marshal audit key: %w", err)
	}
	px, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return fmt.Errorf("marshal audit public key: %w", err)
	}
	if err := writeNew(privPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), 0o600); err != nil {
		return err
	}
	return writeNew(pubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: px}), 0o644)
}

func writeNew(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.Write(b)
	return errors.Join(err, f.Close())
}
