package approval

import (
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"html/template"
	"net/http"
	"strings"
	"time"
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
	}
	return template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html"))
}

const cookieMaxAge = 12 * time.Hour

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
	_ = s.pages.ExecuteTemplate(w, "login.html", map[string]any{"Nonce": n, "Error": msg})
}

func (s *Service) loginPage(w http.ResponseWriter, r *http.Request) error {
	s.renderLogin(w, http.StatusOK, "")
	return nil
}

func (s *Service) login(w http.ResponseWriter, r *http.Request) error {
	tok := strings.TrimSpace(r.PostFormValue("token"))
	if _, ok := s.authenticate(tok); !ok {
		s.renderLogin(w, http.StatusForbidden, "That token is not an approver's.")
		return nil
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: tok, Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: int(cookieMaxAge.Seconds())})
	http.Redirect(w, r, "/approvals", http.StatusSeeOther)
	return nil
}

func (s *Service) logout(w http.ResponseWriter, r *http.Request) error {
	clearCookie(w, r)
	http.Redirect(w, r, "/approvals/login", http.StatusSeeOther)
	return nil
}

func clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: -1})
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
	d := pageData{Nonce: nonce(), CSRF: csrfToken(cred.token), Approver: approverName(r.Context()),
		Pending: pending, Recent: recent, Cookie: cred.cookie,
		Decided: r.URL.Query().Get("decided"), Conflict: r.URL.Query().Get("conflict")}
	pageHeaders(w, d.Nonce)
	w.WriteHeader(http.StatusOK)
	return s.pages.ExecuteTemplate(w, "page.html", d)
}
