package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/airlock-proxy/airlock/internal/jsonapi"
)

// Handler serves the approvals admin API and web page at the admin listener's root:
//
//	GET  /v1/approvals?state=pending&limit=N   {"approvals": [Record…]}
//	GET  /v1/approvals/stream                  server-sent events "created" / "decided"
//	GET  /v1/approvals/{id}                    Record
//	GET  /v1/approvals/{id}/body               the exact held body (a download)
//	POST /v1/approvals/{id}/approve|deny|cancel {"by","comment"} (JSON) or the page's form → Record
//	GET  /approvals                            the web page; POST /approvals/login, /approvals/logout
//
// Every route but the login form needs an approver token (Authorization: Bearer) or a page
// session (its HttpOnly cookie); requests carrying Proxy-Authorization are refused, and so
// are state-changing requests a browser marks as coming from another site (sameOrigin).
// Request bodies are bounded; failed tokens and sign-ins are counted per client address, and
// past the limit failures are answered 429 with Retry-After (a right token always works).
func (s *Service) Handler() http.Handler {
	r := chi.NewRouter()
	s.Routes(r)
	return r
}

// Routes registers the approval routes on r (for an admin router that serves more).
func (s *Service) Routes(r chi.Router) {
	r.Group(func(r chi.Router) {
		r.Use(refuseProxyAuth, s.sameOrigin)
		r.Get("/approvals/login", s.handle(s.loginPage))
		r.With(limitBody(maxLoginBody)).Post("/approvals/login", s.handle(s.login))
		r.With(limitBody(maxLoginBody)).Post("/approvals/logout", s.handle(s.logout))
		r.Group(func(r chi.Router) {
			r.Use(limitBody(maxAPIBody), s.requireApprover)
			r.Get("/approvals", s.handle(s.page))
			r.Get("/v1/approvals", s.handle(s.list))
			r.Get("/v1/approvals/stream", s.handle(s.stream))
			r.Get("/v1/approvals/{id}", s.handle(s.get))
			r.Get("/v1/approvals/{id}/body", s.handle(s.body))
			r.Post("/v1/approvals/{id}/approve", s.handle(s.decideHandler(StateApproved)))
			r.Post("/v1/approvals/{id}/deny", s.handle(s.decideHandler(StateDenied)))
			r.Post("/v1/approvals/{id}/cancel", s.handle(s.decideHandler(StateCancelled)))
		})
	})
}

// Request body bounds: the sign-in form (a name and a token) and everything else (a comment).
const (
	maxLoginBody = 4 << 10
	maxAPIBody   = 64 << 10
)

// limitBody bounds the request body: reading past n fails (the handler answers 413).
func limitBody(n int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ContentLength > n {
				jsonapi.Error(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", n))
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, n)
			next.ServeHTTP(w, r)
		})
	}
}

// httpError is an error with the status and text the client gets.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func errStatus(status int, format string, args ...any) error {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

// handle maps a handler's error to a status in one place.
func (s *Service) handle(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		var (
			he *httpError
			me *http.MaxBytesError
		)
		switch {
		case errors.As(err, &he):
		case errors.As(err, &me):
			he = &httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", me.Limit)}
		case errors.Is(err, ErrBodyGone):
			he = &httpError{http.StatusGone, "the body of " + strconv.Quote(chi.URLParam(r, "id")) + " is not kept: the request has ended (decided, expired, or its agent went away); its size and sha256 are in the record"}
		case errors.Is(err, ErrNotFound):
			he = &httpError{http.StatusNotFound, "no approval with id " + strconv.Quote(chi.URLParam(r, "id"))}
		case errors.Is(err, ErrDecided):
			he = &httpError{http.StatusConflict, err.Error()}
		case errors.Is(err, context.Canceled):
			return // the client went away
		default:
			s.log.Error("approvals API", "method", r.Method, "path", r.URL.Path, "err", err)
			he = &httpError{http.StatusServiceUnavailable, "approval store unavailable"}
		}
		if isForm(r) && he.status == http.StatusConflict {
			http.Redirect(w, r, "/approvals?conflict="+url.QueryEscape(chi.URLParam(r, "id")), http.StatusSeeOther)
			return
		}
		jsonapi.Error(w, he.status, he.msg)
	}
}

// refuseProxyAuth turns away anything that carries a proxy credential: that is a sandbox
// (or something speaking for one), and a sandbox can never approve.
func refuseProxyAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Authorization") != "" {
			jsonapi.Error(w, http.StatusForbidden, "requests carrying Proxy-Authorization (a sandbox credential) may not use the approvals API")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sameOrigin refuses, with 403 and before any credential is looked at, a state-changing
// request (anything but GET, HEAD and OPTIONS) that a browser says comes from another site:
// Sec-Fetch-Site other than same-origin or none (typed by the user) or, from browsers that
// do not send it, an Origin that is neither this listener's host nor page_url's origin
// ("null" included). Any web page can make
// a browser post a form here; such posts must not sign in, decide, sign out, or count as
// failed sign-ins of the approvers' own address. Clients that send neither header (curl,
// the CLI, approval services) are not browsers and pass.
func (s *Service) sameOrigin(next http.Handler) http.Handler {
	var pageOrigin string
	if u, err := url.Parse(s.cfg.PageURL); err == nil && u.Host != "" {
		pageOrigin = strings.ToLower(u.Scheme + "://" + u.Host)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
			next.ServeHTTP(w, r)
			return
		}
		if why := crossSite(r, pageOrigin); why != "" {
			s.log.Info("approvals: cross-site request refused", "method", r.Method, "path", r.URL.Path, "addr", clientAddr(r), "why", why)
			jsonapi.Error(w, http.StatusForbidden, "cross-site request refused ("+why+"): sign in and decide on the approvals page itself, or use the API with Authorization: Bearer <token>")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// crossSite says why r looks like a browser request from another site ("" if it does not).
func crossSite(r *http.Request, pageOrigin string) string {
	// A browser sets Sec-Fetch-Site itself and a page cannot change it: when present it
	// decides. (The page's no-referrer policy makes Chromium send "Origin: null" on its own
	// same-origin form posts, so Origin is only looked at without it.)
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "":
	case "same-origin", "none":
		return ""
	default:
		return "Sec-Fetch-Site: " + strconv.Quote(site)
	}
	origin := r.Header.Values("Origin")
	if len(origin) == 0 {
		return ""
	}
	if len(origin) > 1 {
		return "more than one Origin"
	}
	o := strings.ToLower(strings.TrimSpace(origin[0]))
	if pageOrigin != "" && o == pageOrigin {
		return ""
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" {
		return "Origin " + strconv.Quote(origin[0])
	}
	if u.Host != strings.ToLower(r.Host) {
		return "Origin " + strconv.Quote(origin[0]) + " is not this host"
	}
	return ""
}

type approverKey struct{}

// approverName is the authenticated approver of a request that passed requireApprover.
func approverName(ctx context.Context) string { n, _ := ctx.Value(approverKey{}).(string); return n }

// requireApprover authenticates the approver: no credential → 401, a wrong token → 403, an
// ended session → 401 (the page: the sign-in form), a cookie-authenticated POST without the
// session's CSRF token → 403. The credential is checked first: a right token or live session
// is always accepted; a wrong token from an address with too many failures gets 429.
func (s *Service) requireApprover(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		page := r.URL.Path == "/approvals"
		cred, ok := requestCredential(r)
		if !ok {
			if page {
				s.renderLogin(w, http.StatusUnauthorized, "")
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="airlock approvals"`)
			jsonapi.Error(w, http.StatusUnauthorized, "approver token required: Authorization: Bearer <token>")
			return
		}
		var name string
		if cred.cookie() {
			n, live, err := s.session(r.Context(), cred.session)
			if err != nil {
				s.log.Error("approvals API: session lookup", "err", err)
				jsonapi.Error(w, http.StatusServiceUnavailable, "approval store unavailable")
				return
			}
			if !live {
				clearCookie(w, r, s.secureCookie(r))
				if page {
					s.renderLogin(w, http.StatusUnauthorized, "Your session has ended; sign in again.")
					return
				}
				jsonapi.Error(w, http.StatusUnauthorized, "the session has ended: sign in again, or use Authorization: Bearer <token>")
				return
			}
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				got := r.Header.Get("X-CSRF-Token")
				if got == "" {
					got = r.PostFormValue("csrf")
				}
				if !constantEqual(got, csrfToken(cred.session)) {
					jsonapi.Error(w, http.StatusForbidden, "missing or wrong CSRF token; reload the approvals page")
					return
				}
			}
			name = n
		} else {
			n, ok := s.authenticate(cred.token)
			if !ok {
				if wait := s.logins.fail("addr:"+clientAddr(r), s.now()); wait > 0 {
					w.Header().Set("Retry-After", retryAfter(wait))
					jsonapi.Error(w, http.StatusTooManyRequests, "token is not an approver's, and too many approver tokens or sign-ins from this address failed; retry after "+retryAfter(wait)+"s")
					return
				}
				jsonapi.Error(w, http.StatusForbidden, "token is not an approver's")
				return
			}
			name = n
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), approverKey{}, name)))
	})
}

func isForm(r *http.Request) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt == "application/x-www-form-urlencoded" || mt == "multipart/form-data"
}

func (s *Service) list(w http.ResponseWriter, r *http.Request) error {
	f := ListFilter{State: State(r.URL.Query().Get("state"))}
	if f.State != "" && !f.State.Valid() {
		return errStatus(http.StatusBadRequest, "state: want pending, approved, denied, cancelled, expired or disconnected, got %q", f.State)
	}
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 {
			return errStatus(http.StatusBadRequest, "limit: want a positive number, got %q", l)
		}
		f.Limit = n
	}
	recs, err := s.store.List(r.Context(), f)
	if err != nil {
		return err
	}
	if recs == nil {
		recs = []Record{}
	}
	jsonapi.Write(w, http.StatusOK, map[string]any{"approvals": recs})
	return nil
}

func (s *Service) get(w http.ResponseWriter, r *http.Request) error {
	rec, err := s.store.Get(r.Context(), chi.URLParam(r, "id"))
	if err != nil {
		return err
	}
	jsonapi.Write(w, http.StatusOK, rec)
	return nil
}

// body serves a record's exact body as a download, never as something a browser renders:
// the sandbox chose those bytes.
func (s *Service) body(w http.ResponseWriter, r *http.Request) error {
	id := chi.URLParam(r, "id")
	b, err := s.store.Body(r.Context(), id)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": id + ".body"}))
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Airlock-Body-Sha256", sha256Hex(b))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	return nil
}

// DecideRequest is the JSON body of approve and deny. By is informational: the record's
// decided_by is always the approver the token belongs to.
type DecideRequest struct {
	By      string `json:"by,omitempty"`
	Comment string `json:"comment,omitempty"`
}

const maxComment = 4096

func (s *Service) decideHandler(state State) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		var body DecideRequest
		form := isForm(r)
		if form {
			if err := r.ParseForm(); err != nil {
				var me *http.MaxBytesError
				if errors.As(err, &me) {
					return err
				}
				return errStatus(http.StatusBadRequest, "form: %v", err)
			}
			body.Comment = r.PostFormValue("comment")
		} else if r.ContentLength != 0 {
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil && !errors.Is(err, io.EOF) {
				var me *http.MaxBytesError
				if errors.As(err, &me) {
					return err
				}
				return errStatus(http.StatusBadRequest, "body: want JSON {\"by\": …, \"comment\": …}: %v", err)
			}
		}
		if len(body.Comment) > maxComment {
			return errStatus(http.StatusBadRequest, "comment: longer than %d bytes", maxComment)
		}
		name := approverName(r.Context())
		id := chi.URLParam(r, "id")
		if body.By != "" && body.By != name {
			s.log.Info("approver named someone else in 'by'; recording the token's owner", "id", id, "by", body.By, "approver", name)
		}
		rec, err := s.Decide(r.Context(), id, state, name, body.Comment)
		if err != nil {
			return err
		}
		if form {
			http.Redirect(w, r, "/approvals?decided="+url.QueryEscape(id), http.StatusSeeOther)
			return nil
		}
		jsonapi.Write(w, http.StatusOK, rec)
		return nil
	}
}

// sseHeartbeat keeps idle streams (and proxies between) from timing out.
const sseHeartbeat = 20 * time.Second

func (s *Service) stream(w http.ResponseWriter, r *http.Request) error {
	events, cancel := s.Subscribe()
	defer cancel()
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a stream outlives the server's write timeout
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := io.WriteString(w, "retry: 3000\n\n"); err != nil {
		return nil
	}
	if err := rc.Flush(); err != nil {
		return nil
	}
	beat := time.NewTicker(sseHeartbeat)
	defer beat.Stop()
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-beat.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return nil
			}
		case e, ok := <-events:
			if !ok {
				return nil // service closing or we fell behind: the client reconnects
			}
			b, err := json.Marshal(e.Record)
			if err != nil {
				return nil
			}
			if _, err := fmt.Fprintf(w, "event: %s\nid: %s\ndata: %s\n\n", e.Type, e.Record.ID, b); err != nil {
				return nil
			}
		}
		if err := rc.Flush(); err != nil {
			return nil
		}
	}
}
