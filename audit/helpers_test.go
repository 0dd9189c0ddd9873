package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// testKey writes a fresh Ed25519 seed (hex) to a file and returns the file and public key.
func testKey(t *testing.T) (string, ed25519.PublicKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "audit.key")
	if err := os.WriteFile(p, []byte(hex.EncodeToString(priv.Seed())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p, pub
}

func testEvent(i int) *Event {
	return &Event{Kind: "request", SandboxID: "sbx-1", Method: "GET", Scheme: "https",
		Host: "api.example.com", Port: 443, Path: fmt.Sprintf("/item/%d", i), Decision: "allow", Rule: "example.read"}
}

func openSink(t *testing.T, o Options) *Sink {
	t.Helper()
	s, err := Open(o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func record(t *testing.T, s *Sink, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if err := s.Record(context.Background(), testEvent(i)); err != nil {
			t.Fatalf("Record %d: %v", i, err)
		}
	}
}

// writeLog records n events into a fresh signed log and closes it.
func writeLog(t *testing.T, n int, o Options) (string, ed25519.PublicKey) {
	t.Helper()
	keyFile, pub := testKey(t)
	if o.Path == "" {
		o.Path = filepath.Join(t.TempDir(), "audit.jsonl")
	}
	o.SigningKeyFile = keyFile
	s := openSink(t, o)
	record(t, s, 0, n)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return o.Path, pub
}

func readLines(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.SplitAfter(b, []byte("\n"))[:bytes.Count(b, []byte("\n"))]
}

func writeLines(t *testing.T, path string, lines [][]byte) {
	t.Helper()
	if err := os.WriteFile(path, bytes.Join(lines, nil), 0o600); err != nil {
		t.Fatal(err)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
