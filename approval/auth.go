package approval

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

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

// csrfToken is the form token of a page session: only someone who holds the session id (the
// HttpOnly cookie, which scripts cannot read) or its rendered page can produce it.
func csrfToken(sessionID string) string {
	s := sha256.Sum256([]byte("airlock-approvals-csrf\x00" + sessionID))
	return hex.EncodeToString(s[:16])
}

// cookieName holds an approval page session id (HttpOnly, SameSite=Strict, Secure over TLS).
// The id is opaque and random; the store keeps its hash (see Session).
const cookieName = "airlock_session"

// credential is how a request authenticated.
type credential struct {
	token   string // a bearer approver token
	session string // or the page's session id (form posts must then carry the CSRF token)
}

func (c credential) cookie() bool { return c.session != "" }

// requestCredential finds the credential of r: a bearer Authorization header, else the
// page's session cookie. ok is false when there is neither (or Authorization is not Bearer).
func requestCredential(r *http.Request) (credential, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return credential{}, false
		}
		return credential{token: strings.TrimSpace(tok)}, true
	}
	if c, err := r.Cookie(cookieName); err == nil && c.Value != "" {
		return credential{session: c.Value}, true
	}
	return credential{}, false
}

// clientAddr is the address failed sign-ins are counted against: the peer's IP.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// retryAfter is a Retry-After value (whole seconds, at least 1) for d.
func retryAfter(d time.Duration) string {
	return strconv.FormatInt(int64(max((d+time.Second-1)/time.Second, 1)), 10)
}
