package approval

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// States of a record. Only pending changes, and only once.
const (
	StatePending   = "pending"
	StateApproved  = "approved"
	StateDenied    = "denied"
	StateExpired   = "expired"
	StateCancelled = "cancelled"
)

// DecidedBySystem is DecidedBy when airlock itself ended a record (expiry, cancellation).
const DecidedBySystem = "airlock"

// Record is one held request as stored, listed by the admin API and sent to webhooks.
// It never holds credential values: the URL's secret query values are redacted and
// credentials are named, not attached.
type Record struct {
	ID            string            `json:"id"`
	State         string            `json:"state"`
	Sandbox       string            `json:"sandbox"`
	Labels        map[string]string `json:"labels,omitempty"`
	Method        string            `json:"method"`
	URL           string            `json:"url"`
	ContentType   string            `json:"content_type,omitempty"`
	BodyPreview   string            `json:"body_preview"`
	BodySize      int64             `json:"body_size"`
	BodyTruncated bool              `json:"body_truncated,omitempty"`
	BodySHA256    string            `json:"body_sha256"`
	// RequestSHA256 binds the approval to method, URL, the policy-visible headers and body.
	RequestSHA256 string    `json:"request_sha256"`
	Rule          string    `json:"rule"`
	Reason        string    `json:"reason"`
	Credentials   []string  `json:"credentials,omitempty"`
	Created       time.Time `json:"created"`
	Expires       time.Time `json:"expires"`
	DecidedBy     string    `json:"decided_by"`
	DecidedAt     time.Time `json:"decided_at,omitzero"`
	Comment       string    `json:"comment,omitempty"`
	// RetryOf is the approval whose grant this request reused (retry window).
	RetryOf string `json:"retry_of,omitempty"`
	// ReusedBy is the retry that used this approval's grant (each grant is used once).
	ReusedBy string `json:"reused_by,omitempty"`
}

// Pending reports whether the record still waits for a decision.
func (r Record) Pending() bool { return r.State == StatePending }

// sensitiveHeader reports headers that never take part in an approval: they carry the
// sandbox's proxy credential or credentials the proxy attaches itself.
func sensitiveHeader(k string) bool {
	k = strings.ToLower(k)
	return k == "authorization" || k == "cookie" || strings.HasPrefix(k, "proxy-")
}

// RequestHash is the SHA-256 (hex) that binds an approval to a request: method, full URL,
// the headers the policy saw (names lower-cased and sorted, values in order; Authorization,
// Cookie and Proxy-* excluded) and the body, each length-prefixed so no two requests share
// an encoding.
func RequestHash(method, rawURL string, h http.Header, body []byte) string {
	d := sha256.New()
	field := func(p []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		d.Write(n[:])
		d.Write(p)
	}
	field([]byte("airlock-approval-v1"))
	field([]byte(strings.ToUpper(method)))
	field([]byte(rawURL))
	writeHeaders(field, h)
	field(body)
	return hex.EncodeToString(d.Sum(nil))
}

func writeHeaders(field func([]byte), h http.Header) {
	merged := map[string][]string{}
	for k, vs := range h {
		if sensitiveHeader(k) {
			continue
		}
		lk := strings.ToLower(k)
		merged[lk] = append(merged[lk], vs...)
	}
	keys := make([]string, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(keys)))
	field(n[:])
	for _, k := range keys {
		field([]byte(k))
		binary.BigEndian.PutUint64(n[:], uint64(len(merged[k])))
		field(n[:])
		for _, v := range merged[k] {
			field([]byte(v))
		}
	}
}

// secretQueryWords mark query parameters whose values are redacted in records.
var secretQueryWords = [...]string{"token", "key", "secret", "password", "passwd", "pwd",
	"auth", "sig", "credential", "session", "code", "jwt", "bearer"}

// RedactURL returns rawURL with user info and the values of secret-looking query
// parameters (names containing token, key, secret, password, auth, sig, …) replaced by
// "[redacted]". An unparsable URL is replaced whole.
func RedactURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "[unparsable URL redacted]"
	}
	if u.User != nil {
		u.User = url.User("[redacted]")
	}
	if u.RawQuery == "" {
		return u.String()
	}
	parts := strings.Split(u.RawQuery, "&")
	for i, p := range parts {
		name, _, hasValue := strings.Cut(p, "=")
		dec, err := url.QueryUnescape(name)
		if err != nil {
			dec = name
		}
		if hasValue && secretQueryName(dec) {
			parts[i] = name + "=[redacted]"
		}
	}
	u.RawQuery = strings.Join(parts, "&")
	return u.String()
}

func secretQueryName(name string) bool {
	n := strings.ToLower(name)
	for _, w := range secretQueryWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// Preview returns the first max bytes of body as valid UTF-8 (never cutting a character;
// invalid bytes become U+FFFD) and whether it was cut short.
func Preview(body []byte, max int) (string, bool) {
	if max < 0 {
		max = 0
	}
	if len(body) <= max {
		return strings.ToValidUTF8(string(body), "\uFFFD"), false
	}
	cut := max
	// Step back over a partial UTF-8 sequence at the cut (at most 3 continuation bytes).
	for i := 0; i < utf8.UTFMax-1 && cut > 0 && !utf8.RuneStart(body[cut]); i++ {
		cut--
	}
	return strings.ToValidUTF8(string(body[:cut]), "\uFFFD"), true
}

// newID returns a random record id such as "apr-1f0c9a7b3d2e4f56a1b2c3d4".
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux.
	return "apr-" + hex.EncodeToString(b[:])
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
