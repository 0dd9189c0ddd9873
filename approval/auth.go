package approval

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
)

// minTokenLen is the shortest approver token accepted.
const minTokenLen = 16

// secretString is a token: it prints, logs and marshals as "[redacted]".
type secretString string

func (secretString) String() string               { return "[redacted]" }
func (secretString) LogValue() slog.Value         { return slog.StringValue("[redacted]") }
func (secretString) MarshalJSON() ([]byte, error) { return []byte(`"[redacted]"`), nil }
func (s secretString) GoString() string           { return s.String() }

// approver is a configured approver with the SHA-256 of its token (compared in constant time).
type approver struct {
	name string
	sum  [32]byte
}

func loadApprovers(cfgs []ApproverConfig) ([]approver, error) {
	out := make([]approver, 0, len(cfgs))
	for i, a := range cfgs {
		b, err := os.ReadFile(a.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("approvals.approvers[%d].token_file: %w", i, err)
		}
		tok := strings.TrimSpace(string(b))
		if len(tok) < minTokenLen {
			return nil, fmt.Errorf("approvals.approvers[%d].token_file: %s holds a token shorter than %d characters",
				i, a.TokenFile, minTokenLen)
		}
		out = append(out, approver{name: a.Name, sum: sha256.Sum256([]byte(tok))})
	}
	return out, nil
}

// authenticate returns the approver whose token is tok. Every approver is compared, in
// constant time, so the answer's timing does not depend on which one matched.
func (s *Service) authenticate(tok string) (string, bool) {
	if tok == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(tok))
	name := ""
	for _, a := range s.approvers {
		if subtle.ConstantTimeCompare(sum[:], a.sum[:]) == 1 {
			name = a.name
		}
	}
	return name, name != ""
}

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
