package approval

import (
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-proxy/airlock/internal/jsonapi"
	"github.com/airlock-proxy/airlock/internal/termsafe"
)

//go:embed templates/*.html
var templateFS embed.FS

// pageTemplates are parsed once per Service (no package-level state).
func parsePageTemplates() *template.Template {
	funcs := template.FuncMap{
		"ago": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05 UTC")
		},
		"short": func(s string) string {
			if len(s) > 16 {
				return s[:16] + "…"
			}
			return s
		},
		"vis":      func(s string) template.HTML { return visible(s, false) },
		"visblock": func(s string) template.HTML { return visible(s, true) },
	}
	return template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html"))
}

func constantEqual(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

func nonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawStdEncoding.EncodeToString(b[:])
}

// pageHeaders forbid framing, sniffing, caching and any script but the page's own.
func pageHeaders(w http.ResponseWriter, n string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'nonce-"+n+"'; script-src 'nonce-"+n+
		"'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
}

func (s *Service) renderLogin(w http.ResponseWriter, status int, msg string) {
	n := nonce()
	pageHeaders(w, n)
	w.WriteHeader(status)
	_ = s.pages.ExecuteTemplate(w, "login.html", map[string]any{"Nonce": n, "Error": msg,
		"TTL": humanDuration(s.cfg.SessionTTL.D())})
}

func (s *Service) loginPage(w http.ResponseWriter, r *http.Request) error {
	s.renderLogin(w, http.StatusOK, "")
	return nil
}

// login exchanges an approver's token (and, optionally, name: then it must be the token's)
// for a page session: an opaque random id in an HttpOnly cookie, recorded (hashed, with its
// expiry) in the store. Cross-site posts never get here (sameOrigin). The token is checked
// first: a right one always signs in. Failed attempts are counted per client address; past
// the limit, further failures from that address get 429 with Retry-After.
func (s *Service) login(w http.ResponseWriter, r *http.Request) error {
	if err := r.ParseForm(); err != nil {
		var me *http.MaxBytesError
		if errors.As(err, &me) {
			s.renderLogin(w, http.StatusRequestEntityTooLarge, "That sign-in form was too large.")
			return nil
		}
		s.renderLogin(w, http.StatusBadRequest, "That sign-in form could not be read.")
		return nil
	}
	name := strings.TrimSpace(r.PostFormValue("name"))
	tok := strings.TrimSpace(r.PostFormValue("token"))
	addr := "addr:" + clientAddr(r)
	got, ok := s.authenticate(tok)
	if ok && name == "" {
		name = got // the name is optional: the token says whose it is
	}
	if !ok || got != name {
		wait := s.logins.fail(addr, s.now())
		logged := "(not an approver's name)" // what was typed may be a token pasted in the wrong box
		if s.approverNames[name] {
			logged = name
		}
		s.log.Info("approval page sign-in failed", "addr", clientAddr(r), "name", logged, "throttled", wait > 0)
		if wait > 0 {
			w.Header().Set("Retry-After", retryAfter(wait))
			s.renderLogin(w, http.StatusTooManyRequests, "That name and token are not an approver's, and too many sign-ins from this address failed; try again in "+retryAfter(wait)+" seconds.")
			return nil
		}
		s.renderLogin(w, http.StatusForbidden, "That name and token are not an approver's.")
		return nil
	}
	s.logins.reset(addr)
	id, err := s.startSession(r.Context(), name)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: "/", HttpOnly: true,
		Secure: s.secureCookie(r), SameSite: http.SameSiteStrictMode, MaxAge: int(s.cfg.SessionTTL.D().Seconds())})
	http.Redirect(w, r, "/approvals", http.StatusSeeOther)
	return nil
}

// logout ends the session on the server (on every replica), then clears the cookie.
func (s *Service) logout(w http.ResponseWriter, r *http.Request) error {
	if c, err := r.Cookie(cookieName); err == nil && c.Value != "" {
		if !constantEqual(r.PostFormValue("csrf"), csrfToken(c.Value)) {
			jsonapi.Error(w, http.StatusForbidden, "missing or wrong CSRF token; reload the approvals page")
			return nil
		}
		if err := s.store.DeleteSession(r.Context(), sessionIDHash(c.Value)); err != nil {
			return err
		}
	}
	clearCookie(w, r, s.secureCookie(r))
	http.Redirect(w, r, "/approvals/login", http.StatusSeeOther)
	return nil
}

// secureCookie: the cookie is Secure when the page is served over TLS, here or (page_url
// says https) at a proxy in front.
func (s *Service) secureCookie(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(strings.ToLower(s.cfg.PageURL), "https://")
}

func clearCookie(w http.ResponseWriter, _ *http.Request, secure bool) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true,
		Secure: secure, SameSite: http.SameSiteStrictMode, MaxAge: -1})
}

// humanDuration writes d as "12 hours" or "30 minutes" for the sign-in page.
func humanDuration(d time.Duration) string {
	if d >= time.Hour && d%time.Hour == 0 {
		if d == time.Hour {
			return "1 hour"
		}
		return strconv.Itoa(int(d/time.Hour)) + " hours"
	}
	return strconv.Itoa(int(max(d/time.Minute, 1))) + " minutes"
}

// pageData is what templates/page.html shows.
type pageData struct {
	Nonce    string
	CSRF     string
	Approver string
	Pending  []Record
	Recent   []Record
	Decided  string
	Conflict string
	Cookie   bool
	Preview  int64 // body_preview: bodies longer than this show a cut preview
}

func (s *Service) page(w http.ResponseWriter, r *http.Request) error {
	pending, err := s.store.List(r.Context(), ListFilter{State: StatePending})
	if err != nil {
		return err
	}
	all, err := s.store.List(r.Context(), ListFilter{Limit: 40})
	if err != nil {
		return err
	}
	var recent []Record
	for _, rec := range all {
		if !rec.Pending() && len(recent) < 20 {
			recent = append(recent, rec)
		}
	}
	cred, _ := requestCredential(r)
	d := pageData{Nonce: nonce(), Approver: approverName(r.Context()),
		Pending: pending, Recent: recent, Cookie: cred.cookie(), Preview: int64(s.cfg.BodyPreview),
		Decided: r.URL.Query().Get("decided"), Conflict: r.URL.Query().Get("conflict")}
	if cred.cookie() {
		d.CSRF = csrfToken(cred.session)
	}
	pageHeaders(w, d.Nonce)
	w.WriteHeader(http.StatusOK)
	return s.pages.ExecuteTemplate(w, "page.html", d)
}

// visible renders text a sandbox chose (method, URL, headers, warnings, body preview) as HTML
// in which nothing is hidden or reordered: every character that does not show as itself
// (controls, bidirectional overrides and isolates, zero-width and other format characters,
// blank letters; see termsafe.Visible) is written as a marked escape such as \u202e, so an
// approver cannot be shown a reversed target, a header that is not there, or a body with
// hidden parts. In a block (the body preview) newlines, tabs and CR before LF are kept.
func visible(s string, block bool) template.HTML {
	var b strings.Builder
	plain := 0 // start of the run of visible text not yet written
	flush := func(end int) {
		b.WriteString(template.HTMLEscapeString(s[plain:end]))
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		keep := termsafe.Visible(r) && !(r == utf8.RuneError && n <= 1)
		if block && (r == '\n' || r == '\t' || r == '\r' && strings.HasPrefix(s[i+1:], "\n")) {
			keep = true
		}
		if keep {
			i += n
			continue
		}
		flush(i)
		var esc string
		switch {
		case r == utf8.RuneError && n <= 1:
			esc = fmt.Sprintf(`\x%02x`, s[i])
		case r == '\n':
			esc = `\n`
		case r == '\t':
			esc = `\t`
		case r == '\r':
			esc = `\r`
		case r < 0x100:
			esc = fmt.Sprintf(`\x%02x`, r)
		default:
			esc = fmt.Sprintf(`\u%04x`, r)
		}
		b.WriteString(`<span class="esc" title="a character that does not show as itself">`)
		b.WriteString(esc)
		b.WriteString(`</span>`)
		i += n
		plain = i
	}
	flush(len(s))
	return template.HTML(b.String()) //nolint:gosec // every byte of s is escaped above
}
