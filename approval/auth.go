package approval

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strings"

	"github.com/airlock-proxy/airlock/internal/bearer"
)

// secretString is a token: it prints, logs and marshals as "[redacted]".
type secretString string

func (secretString) String() string               { return "[redacted]" }
func (secretString) LogValue() slog.Value         { return slog.StringValue("[redacted]") }
func (secretString) MarshalJSON() ([]byte, error) { return []byte(`"[redacted]"`), nil }
func (s secretString) GoString() string           { return s.String() }

func loadApprovers(cfgs []ApproverConfig) (*bearer.Set, error) {
	entries := make([]bearer.Entry, len(cfgs))
	for i, c := range cfgs {
		entries[i] = bearer.Entry{Name: c.Name, File: c.TokenFile}
	}
	return bearer.Load("approvals.approvers", entries)
}

// authenticate returns the approver whose token is tok (compared in constant time).
func (s *Service) authenticate(tok string) (string, bool) { return s.approvers.Authenticate(tok) }

// csrfToken is the form token for an approver's token: only someone who holds the token
// (or its page) can produce it.
func csrfToken(tok string) string {
	s := sha256.Sum256([]byte("airlock-approvals-csrf\x00" + tok))
	return hex.EncodeToString(s[:16])
}

// cookieName holds an approver token for the web page (HttpOnly, SameSite=Strict).
const cookieName = "airlock_approver"

// credential is how a request authenticated.
type credential struct {
	token  string
	cookie bool // from the page's cookie: form posts must carry the CSRF token
}

// requestCredential finds the approver token of r: a bearer Authorization header, else the
// page's cookie.
func requestCredential(r *http.Request) (credential, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return credential{}, false
		}
		return credential{token: strings.TrimSpace(tok)}, true
	}
	if c, err := r.Cookie(cookieName); err == nil && c.Value != "" {
		return credential{token: c.Value, cookie: true}, true
	}
	return credential{}, false
}
