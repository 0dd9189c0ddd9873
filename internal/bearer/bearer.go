// Package bearer holds named bearer tokens read from files and checks a request's token
// against them in constant time. Approvers (approvals API) and credential issuers (the
// sandbox token API) are both authenticated this way.
package bearer

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// MinLen is the shortest token accepted from a file.
const MinLen = 16

// Entry is a named token kept in a file.
type Entry struct {
	Name, File string
}

// Set is a list of named tokens; only their SHA-256 is kept. The zero Set accepts nothing.
type Set struct {
	names []string
	sums  [][32]byte
}

// Load reads each entry's file (surrounding white space is dropped). An error names the
// entry's config key: key[i].token_file, key being where the list sits in the config
// (e.g. "approvals.approvers").
//
// Every entry is read; the error reports each that failed (errors.Join).
func Load(key string, entries []Entry) (*Set, error) {
	s := &Set{}
	var errs []error
	for i, e := range entries {
		b, err := os.ReadFile(e.File)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s[%d].token_file: %w; want a readable file holding a token of at least %d characters", key, i, err, MinLen))
			continue
		}
		tok := strings.TrimSpace(string(b))
		if len(tok) < MinLen {
			errs = append(errs, fmt.Errorf("%s[%d].token_file: %s holds a token of %d characters; want at least %d (e.g. head -c 24 /dev/urandom | base64 > %s)", key, i, e.File, len(tok), MinLen, e.File))
			continue
		}
		s.Add(e.Name, tok)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// Add adds a token under name.
func (s *Set) Add(name, tok string) {
	s.names = append(s.names, name)
	s.sums = append(s.sums, sha256.Sum256([]byte(tok)))
}

// Len is the number of tokens.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.names)
}

// Authenticate returns the name whose token is tok. Every token is compared, in constant
// time, so the answer's timing does not depend on which one matched.
func (s *Set) Authenticate(tok string) (string, bool) {
	if s == nil || tok == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(tok))
	name := ""
	for i := range s.sums {
		if subtle.ConstantTimeCompare(sum[:], s.sums[i][:]) == 1 {
			name = s.names[i]
		}
	}
	return name, name != ""
}

// ErrMalformed is an Authorization header that is not "Bearer TOKEN".
//
//lint:ignore ST1005 the message starts with the header's own name, capitalised as HTTP spells it.
var ErrMalformed = errors.New(`Authorization header: want "Bearer TOKEN"`)

// FromRequest returns the bearer token of r's Authorization header: ok is false when there
// is none, err is ErrMalformed when it is not a bearer token.
func FromRequest(r *http.Request) (tok string, ok bool, err error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", false, nil
	}
	scheme, t, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(t) == "" {
		return "", false, ErrMalformed
	}
	return strings.TrimSpace(t), true, nil
}
