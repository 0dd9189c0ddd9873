// Package redact removes secrets from configuration values before they are shown: URLs
// that carry userinfo or query parameters (a bundle URL with an access token, a database
// URL with a password), and free text (error messages, log lines) that may quote such a
// URL or a "password=..." pair. It is the one place the control plane does this: API
// answers, log lines (Attr, for slog.HandlerOptions.ReplaceAttr) and printed errors go
// through it.
package redact

import (
	"log/slog"
	"net/url"
	"regexp"
	"strings"
)

// Redacted replaces a secret.
const Redacted = "[redacted]"

// URL returns raw with every part that may carry a secret replaced by [redacted]: the
// whole userinfo (a token is often the user name alone), every query value (parameter
// names are kept) and the fragment. Scheme, host, port and path are kept, so the result
// still says where the value points. A value with a scheme that does not parse keeps only
// its scheme; one without a scheme (a file path) is passed to Text. URL is idempotent.
func URL(raw string) string {
	scheme, rest, hasScheme := strings.Cut(raw, "://")
	if !hasScheme {
		return Text(raw)
	}
	// Parse a URL redacted before as well: "[redacted]" is not valid userinfo.
	if after, ok := strings.CutPrefix(rest, Redacted+"@"); ok {
		rest = "x@" + after
	}
	u, err := url.Parse(scheme + "://" + rest)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return scheme + "://" + Redacted
	}
	var b strings.Builder
	b.WriteString(u.Scheme)
	b.WriteString("://")
	if u.User != nil {
		b.WriteString(Redacted)
		b.WriteByte('@')
	}
	b.WriteString(u.Host)
	b.WriteString(u.EscapedPath())
	if u.ForceQuery || u.RawQuery != "" {
		b.WriteByte('?')
		b.WriteString(Query(u.RawQuery))
	}
	if u.Fragment != "" || u.RawFragment != "" {
		b.WriteString("#" + Redacted)
	}
	return b.String()
}

// Query keeps the keys of a raw URL query and replaces every value with [redacted]:
// "a=1&b=x&c" becomes "a=[redacted]&b=[redacted]&[redacted]". A parameter without "=" is
// redacted whole, since some APIs put a bare token there; empty parameters are dropped.
// Keys are re-escaped, so the result never contains a raw control character. Query is
// idempotent. The audit log, the proxy's refusals and URL all redact queries with it.
func Query(raw string) string {
	if raw == "" {
		return ""
	}
	var b strings.Builder
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		key, _, hasValue := strings.Cut(part, "=")
		if !hasValue {
			b.WriteString(Redacted)
			continue
		}
		if k, err := url.QueryUnescape(key); err == nil {
			key = k
		}
		b.WriteString(escapeKey(key))
		b.WriteByte('=')
		b.WriteString(Redacted)
	}
	return b.String()
}

// escapeKey escapes like url.QueryEscape but leaves the brackets of "[redacted]" readable
// and keeps the result stable when it is redacted again.
func escapeKey(k string) string {
	if k == Redacted {
		return k
	}
	return url.QueryEscape(k)
}

// credentialWords end the names of parameters that hold credentials (a user name too: a
// URL's user is often a token, and a database error quotes the DSN's user= this way).
const credentialWords = `(?:user|username|password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|signature|sig|auth|authorization|credential)s?`

var (
	// urlInText is a URL with a scheme in free text, up to a space, quote or bracket that
	// ends it (url.Error quotes its URL).
	urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]{0,31}://[^\s"'<>` + "`" + `]+`)
	// credentialPair is name=value where the name says it is a credential, as in a
	// PostgreSQL keyword DSN ("host=db password=...") or a query string.
	credentialPair = regexp.MustCompile(`(?i)\b([a-z0-9_.-]*?` + credentialWords + `)=("[^"]*"|'[^']*'|[^\s&,;"'` + "`" + `]*)`)
	// authHeader is an Authorization or Proxy-Authorization header quoted in text.
	authHeader = regexp.MustCompile(`(?i)\b((?:proxy-)?authorization:\s*)((?:bearer|basic|token|negotiate|digest)\s+)?[^\s,;"']+`)
)

// Text redacts every URL in s (as URL does), the value of every name=value pair whose
// name looks like a credential (password, token, secret, api_key, signature, auth...),
// and quoted Authorization headers. It is meant for error messages and log lines, which
// may quote a configured URL. Text is idempotent.
func Text(s string) string {
	if strings.Contains(s, "://") {
		s = urlInText.ReplaceAllStringFunc(s, func(m string) string {
			// A trailing ')' '.' ',' ';' ':' is punctuation around the URL, not part of it.
			trimmed := strings.TrimRight(m, ").,;:")
			return URL(trimmed) + m[len(trimmed):]
		})
	}
	if strings.Contains(s, "=") {
		s = credentialPair.ReplaceAllStringFunc(s, func(m string) string {
			name, value, _ := strings.Cut(m, "=")
			trimmed := strings.TrimRight(value, ").:")
			if trimmed == "" {
				return m
			}
			if rest, ok := strings.CutPrefix(trimmed, Redacted); ok {
				// Redacted already, here or by the URL step, which ends a URL at '<' or
				// '>': those are kept (dropping one would let the next pass read a longer
				// URL, and Text would not be idempotent), anything else after it redacted.
				kept := redactRest(rest)
				if kept == rest {
					return m
				}
				return name + "=" + Redacted + kept + value[len(trimmed):]
			}
			return name + "=" + Redacted + value[len(trimmed):]
		})
	}
	if strings.Contains(s, ":") && strings.Contains(strings.ToLower(s), "authorization") {
		s = authHeader.ReplaceAllStringFunc(s, func(m string) string {
			sm := authHeader.FindStringSubmatch(m)
			if strings.HasSuffix(m, Redacted) {
				return m
			}
			return sm[1] + sm[2] + Redacted
		})
	}
	return s
}

// redactRest is what follows a [redacted] value: its '<' and '>' kept, everything else
// between them one [redacted], never two side by side (nor one right after the value's
// own), as the URL step would merge them.
func redactRest(rest string) string {
	var b strings.Builder
	last := true // the value's own [redacted] comes before
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; c == '<' || c == '>' {
			b.WriteByte(c)
			last = false
			continue
		}
		if !last {
			b.WriteString(Redacted)
			last = true
		}
	}
	return b.String()
}

// Error returns err with its text redacted (Text); errors.Is and errors.As still see the
// original chain. nil stays nil.
func Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	red := Text(msg)
	if red == msg {
		return err
	}
	return &redactedError{msg: red, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Attr redacts one log attribute; use it as slog.HandlerOptions.ReplaceAttr (directly or
// from a ReplaceAttr of your own) so that every line a handler writes is redacted: the
// message, string values, errors, and fmt.Stringer values such as *url.URL.
func Attr(_ []string, a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if s := v.String(); Text(s) != s {
			a.Value = slog.StringValue(Text(s))
		}
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			if red := Error(x); red != x {
				a.Value = slog.StringValue(red.Error())
			}
		case interface{ String() string }:
			if s := x.String(); Text(s) != s {
				a.Value = slog.StringValue(Text(s))
			}
		}
	}
	return a
}
