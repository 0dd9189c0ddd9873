package approval

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-proxy/airlock/internal/event"
)

// State is where a record stands (see event.ApprovalState, where the values are declared
// once, for telemetry as well).
type State = event.ApprovalState

const (
	StatePending      = event.ApprovalPending
	StateApproved     = event.ApprovalApproved
	StateDenied       = event.ApprovalDenied
	StateCancelled    = event.ApprovalCancelled
	StateExpired      = event.ApprovalExpired
	StateDisconnected = event.ApprovalDisconnected
)

// DecidedBySystem is DecidedBy when airlock itself ended a record (expiry, disconnection).
const DecidedBySystem = "airlock"

// Record is one held request as stored, listed by the admin API and sent to webhooks. It
// shows the request exactly as it will be forwarded if approved: method, URL (query
// included, nothing redacted: the sandbox chose all of it), every forwarded header and the
// body (a preview here; the whole body from GET /v1/approvals/{id}/body). It never holds a
// credential value: credentials are named, and attached only after approval.
type Record struct {
	ID      string            `json:"id"`
	State   State             `json:"state"`
	Sandbox string            `json:"sandbox"`
	Labels  map[string]string `json:"labels,omitempty"`
	Method  string            `json:"method"`
	// URL is scheme://host[:port] followed by the request target exactly as it is sent.
	URL string `json:"url"`
	// Headers are every header that is forwarded, with all values in order. Only what
	// airlock itself adds after approval (credentials, hop-by-hop framing) is not here.
	// Once the record has ended only the names are kept (Ended), each with no values.
	Headers http.Header `json:"headers"`
	// Warnings call out what changes the request's meaning at the upstream beyond method and
	// URL: method-override headers and parameters, routing headers, encoded bodies, upgrades.
	Warnings []string `json:"warnings,omitempty"`
	// Calls are the tool calls or GraphQL operation the body makes, as the policy saw them
	// (destinations whose bodies the policy reads); the body itself is what is approved.
	// Their arguments are dropped once the record has ended.
	Calls         []Call `json:"calls,omitempty"`
	ContentType   string `json:"content_type,omitempty"`
	BodyPreview   string `json:"body_preview"` // "" once the record has ended
	BodySize      int64  `json:"body_size"`
	BodyTruncated bool   `json:"body_truncated,omitempty"`
	BodySHA256    string `json:"body_sha256"`
	// RequestSHA256 binds the approval to method, URL, every forwarded header and the body
	// (RequestHash).
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

// Ended is the record as it is kept once it has ended: the request's shape (method, URL,
// header names, body size, content type and hashes), the rule and the decision stay; header
// values and the body preview do not (nor, in the store, the body). A sandbox's requests
// must not fill the store, and nobody decides on an ended record.
func (r Record) Ended() Record {
	h := make(http.Header, len(r.Headers))
	for k := range r.Headers {
		h[k] = []string{}
	}
	r.Headers = h
	r.BodyPreview = ""
	if len(r.Calls) > 0 {
		calls := make([]Call, len(r.Calls))
		for i, c := range r.Calls {
			c.Arguments = nil
			calls[i] = c
		}
		r.Calls = calls
	}
	return r
}

// Pending reports whether the record still waits for a decision.
func (r Record) Pending() bool { return r.State == StatePending }

// hashDomain starts every encoding RequestHash makes; a new encoding gets a new domain.
const hashDomain = "airlock-approval-v2"

// RequestHash is the SHA-256 (hex) that binds an approval to a request. It covers the method
// (as sent, case kept), the URL (scheme://host[:port] and the request target exactly as sent),
// every header in h (names exactly as sent, sorted; all values in order) and the body. Every
// part is length-prefixed and counted, so no two different requests share an encoding. h
// must be the headers that are forwarded: nothing in it is skipped.
func RequestHash(method, url string, h http.Header, body []byte) string {
	d := sha256.New()
	var n [8]byte
	count := func(c int) {
		binary.BigEndian.PutUint64(n[:], uint64(c))
		d.Write(n[:])
	}
	field := func(s string) {
		count(len(s))
		d.Write([]byte(s))
	}
	field(hashDomain)
	field(method)
	field(url)
	names := slices.Sorted(maps.Keys(h))
	count(len(names))
	for _, k := range names {
		field(k)
		count(len(h[k]))
		for _, v := range h[k] {
			field(v)
		}
	}
	count(len(body))
	d.Write(body)
	return hex.EncodeToString(d.Sum(nil))
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
