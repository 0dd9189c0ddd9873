package bearer

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadAndAuthenticate(t *testing.T) {
	dir := t.TempDir()
	good, short := filepath.Join(dir, "good"), filepath.Join(dir, "short")
	os.WriteFile(good, []byte("  a-token-of-enough-length \n"), 0o600)
	os.WriteFile(short, []byte("short\n"), 0o600)
	s, err := Load("k", []Entry{{Name: "ci", File: good}})
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := s.Authenticate("a-token-of-enough-length"); !ok || name != "ci" {
		t.Errorf("Authenticate(right token) = %q, %v; want ci, true", name, ok)
	}
	for _, tok := range []string{"", "a-token-of-enough-lengtH", " a-token-of-enough-length"} {
		if _, ok := s.Authenticate(tok); ok {
			t.Errorf("Authenticate(%q) accepted", tok)
		}
	}
	if _, err := Load("k", []Entry{{Name: "a", File: good}, {Name: "b", File: short}}); err == nil || !strings.HasPrefix(err.Error(), "k[1].token_file: ") || !strings.Contains(err.Error(), "want at least 16") {
		t.Errorf("Load with a short token: %v, want an error naming k[1].token_file", err)
	}
	// Every bad entry is reported, not only the first.
	_, err = Load("k", []Entry{{Name: "a", File: short}, {Name: "b", File: good}, {Name: "c", File: filepath.Join(dir, "none")}})
	if err == nil || !strings.Contains(err.Error(), "k[0].token_file: ") || !strings.Contains(err.Error(), "k[2].token_file: ") {
		t.Errorf("Load with two bad entries: %v, want both named", err)
	}
	if _, err := Load("k", []Entry{{Name: "a", File: filepath.Join(dir, "none")}}); !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "k[0].token_file: ") {
		t.Errorf("Load with a missing file: %v, want an error naming k[0].token_file", err)
	}
	var zero *Set
	if _, ok := zero.Authenticate("a-token-of-enough-length"); ok || zero.Len() != 0 {
		t.Error("a nil Set accepted a token")
	}
}

func TestFromRequest(t *testing.T) {
	for h, want := range map[string]struct {
		tok string
		ok  bool
		err bool
	}{
		"":             {"", false, false},
		"Bearer abc":   {"abc", true, false},
		"bearer  abc ": {"abc", true, false},
		"Basic abc":    {"", false, true},
		"Bearer":       {"", false, true},
		"Bearer  ":     {"", false, true},
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		if h != "" {
			r.Header.Set("Authorization", h)
		}
		tok, ok, err := FromRequest(r)
		if tok != want.tok || ok != want.ok || (err != nil) != want.err {
			t.Errorf("FromRequest(%q) = %q, %v, %v; want %q, %v, error %v", h, tok, ok, err, want.tok, want.ok, want.err)
		}
	}
}
