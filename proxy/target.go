package proxy

import (
	"errors"
	"net/http"
	"strings"
	"unicode/utf8"
)

// The request target (path and query) is parsed once, here. The policy input is built from
// the parsed form and the forwarded request is re-encoded from it, so that no server can
// read the forwarded target differently from what the policy decided on. What cannot be
// represented unambiguously is refused (400, rule "protocol"):
//
//   - '#' anywhere: a fragment is never sent to a server, and parsers disagree on whether
//     it ends the target.
//   - ';' in the query: some servers split pairs on it as on '&', others (Go, Python since
//     3.9.2) do not; a literal ';' goes as %3B.
//   - a malformed %-escape, or %-escapes that decode to invalid UTF-8 or to NUL: servers
//     pass them on, replace them or truncate at them, each differently.
//   - a query name that is empty or holds a control byte.
//   - in the path: ';' (some servers drop ";params" from a segment, others keep them), a raw
//     backslash (read as '/' by some servers and by WHATWG URL parsers), a dot segment
//     hidden behind an encoded slash or backslash ("..%2F"), and a path that climbs above the
//     root.
//
// Everything else is normalised: the path as NormalizePath says, the query as its pairs in
// order, each name and value decoded once ('+' is a space) and re-encoded with every byte
// but the unreserved ones (A-Z a-z 0-9 - . _ ~) as an upper-case %XX, so a space is %20 and
// a '+' is %2B, and form decoders and plain %-decoders read the same; empty pairs ("&&") and
// a lone '?' are dropped, and a name without '=' gets one. A name may repeat: the policy sees
// every value, in order, and the upstream receives exactly those values in that order (a
// rule on a repeated name should look at every value, not only the first).

// queryPair is one name=value of a query, decoded.
type queryPair struct{ name, value string }

// requestTarget is a request target parsed once: what the policy sees and what is sent.
type requestTarget struct {
	path  string      // normalised, escaped
	query []queryPair // in the order sent
}

// parseTarget parses r's request target as the client sent it (RequestURI), or, for a
// request built in process, as its URL renders it. An error's text is for the agent.
func parseTarget(r *http.Request) (requestTarget, error) {
	raw := r.RequestURI
	if raw == "" && r.URL != nil {
		raw = r.URL.RequestURI()
	}
	rawPath, rawQuery, err := splitTarget(raw)
	if err != nil {
		return requestTarget{}, err
	}
	var t requestTarget
	if t.path, err = NormalizePath(rawPath); err != nil {
		return requestTarget{}, err
	}
	if t.query, err = parseQuery(rawQuery); err != nil {
		return requestTarget{}, err
	}
	return t, nil
}

// splitTarget returns the escaped path and the raw query of an origin-form ("/p?q") or
// absolute-form ("http://host/p?q") request target. The authority of an absolute target ends
// at its first '/' or '?', as in net/url (which gives the host).
func splitTarget(raw string) (path, query string, err error) {
	if strings.IndexByte(raw, '#') >= 0 {
		return "", "", errors.New("the request target contains '#': a fragment is never sent to a server; remove it, or send a literal '#' as %23")
	}
	rest := raw
	if !strings.HasPrefix(raw, "/") && raw != "*" {
		i := strings.Index(raw, "://")
		if i <= 0 {
			return "", "", errors.New("the request target is neither a path (/...) nor an absolute http(s) URL")
		}
		rest = raw[i+3:]
		end := strings.IndexAny(rest, "/?")
		if end < 0 {
			return "", "", nil
		}
		rest = rest[end:]
	}
	path, query, _ = strings.Cut(rest, "?")
	return path, query, nil
}

// parseQuery splits a raw query into its decoded pairs, refusing what servers read apart.
// Reasons name a parameter but never quote a value, which may be a secret.
func parseQuery(raw string) ([]queryPair, error) {
	if raw == "" {
		return nil, nil
	}
	if strings.IndexByte(raw, ';') >= 0 {
		return nil, errors.New("the query contains ';', which some servers read as a separator like '&' and others as data; send a literal ';' as %3B")
	}
	var pairs []queryPair
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		rawName, rawValue, _ := strings.Cut(part, "=")
		name, why := unescapeQuery(rawName)
		switch {
		case why != "":
			return nil, errors.New("a query parameter name " + why)
		case name == "":
			return nil, errors.New("the query has a parameter with an empty name ('=' first, as in '?=x'), which some servers drop and others keep")
		case hasControl(name):
			return nil, errors.New("the query parameter name " + quoteName(name) + " contains a control character")
		}
		value, why := unescapeQuery(rawValue)
		switch {
		case why != "":
			return nil, errors.New("the value of query parameter " + quoteName(name) + " " + why)
		case strings.IndexByte(value, 0) >= 0:
			return nil, errors.New("the value of query parameter " + quoteName(name) + " contains %00, at which some servers cut it short")
		}
		pairs = append(pairs, queryPair{name: name, value: value})
	}
	return pairs, nil
}

// unescapeQuery decodes one query name or value: '+' is a space, %XX a byte. A malformed
// escape and a result that is not UTF-8 are refused: why says what is wrong.
func unescapeQuery(s string) (_ string, why string) {
	const (
		malformed = "has a malformed %-escape (a literal '%' goes as %25)"
		notUTF8   = "is not UTF-8 once decoded, and servers read such bytes differently"
	)
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		if !utf8.ValidString(s) {
			return "", notUTF8
		}
		return s, ""
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b = append(b, ' ')
		case c == '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return "", malformed
			}
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		default:
			b = append(b, c)
		}
	}
	if !utf8.Valid(b) {
		return "", notUTF8
	}
	return string(b), ""
}

// encodeQuery is the forwarded form of pairs: name=value joined by '&', every byte but the
// unreserved ones %-escaped. "" for no pairs.
func encodeQuery(pairs []queryPair) string {
	var b strings.Builder
	for i, p := range pairs {
		if i > 0 {
			b.WriteByte('&')
		}
		escapeStrict(&b, p.name)
		b.WriteByte('=')
		escapeStrict(&b, p.value)
	}
	return b.String()
}

// queryMap is the policy's view of pairs: every value of a name, in order. nil for none.
func queryMap(pairs []queryPair) map[string][]string {
	if len(pairs) == 0 {
		return nil
	}
	m := make(map[string][]string, len(pairs))
	for _, p := range pairs {
		m[p.name] = append(m[p.name], p.value)
	}
	return m
}

const upperHex = "0123456789ABCDEF"

func escapeStrict(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isUnreserved(c) {
			b.WriteByte(c)
			continue
		}
		writeEscaped(b, c)
	}
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// quoteName quotes a query parameter name for a refusal reason, cut to a readable length.
func quoteName(s string) string {
	const max = 60
	if len(s) > max {
		s = s[:max] + "..."
	}
	return "'" + strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return '?'
		}
		return r
	}, s) + "'"
}
