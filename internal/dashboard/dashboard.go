// Package dashboard is the merchant portal: server-rendered pages under
// /dashboard where a merchant's users sign in, manage API keys and see
// their money, payments and the rest, in test or live mode. It calls
// payments.Service, the same code as the API and the CLI, never the API
// over HTTP. Pages use no outside assets; the little JavaScript there is
// (copy button, local times) only improves pages that work without it.
package dashboard

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"
	_ "time/tzdata" // times in the viewer's zone, wherever the server runs
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"paysvc/internal/clientaddr"
	"paysvc/internal/httpapi"
	"paysvc/internal/payments"
	"paysvc/internal/ratelimit"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/*
var staticFS embed.FS

// Prefix is where the dashboard is served, under PUBLIC_BASE_URL.
const Prefix = "/dashboard"

// Options configure the dashboard.
type Options struct {
	Service *payments.Service
	// Redis holds the sign-in attempt counters, shared by every replica.
	Redis redis.UniversalClient
	Log   *slog.Logger
	// SessionTTL is how long a sign-in lasts (DASHBOARD_SESSION_TTL).
	SessionTTL time.Duration
	// Secure marks cookies Secure; false only on plain-http development
	// (PUBLIC_BASE_URL http://…), where a browser would drop them.
	Secure bool
	// AccountAttempts and AddressAttempts are the sign-in attempts allowed
	// per account and per client address in AttemptWindow (defaults 5, 20,
	// 15 minutes).
	AccountAttempts, AddressAttempts int
	AttemptWindow                    time.Duration
	// Clients names a request's client address for AddressAttempts (nil:
	// its connection's peer).
	Clients *clientaddr.Resolver
}

// Dashboard serves the portal's pages.
type Dashboard struct {
	svc       *payments.Service
	log       *slog.Logger
	ttl       time.Duration
	secure    bool
	byAccount *ratelimit.Window
	byAddress *ratelimit.Window
	clients   *clientaddr.Resolver
	mux       *http.ServeMux
	pages     map[string]*template.Template
	volume    volumeCache // the home page's chart
}

// New returns the dashboard.
func New(o Options) *Dashboard {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = 12 * time.Hour
	}
	if o.AccountAttempts <= 0 {
		o.AccountAttempts = 5
	}
	if o.AddressAttempts <= 0 {
		o.AddressAttempts = 20
	}
	if o.AttemptWindow <= 0 {
		o.AttemptWindow = 15 * time.Minute
	}
	d := &Dashboard{
		svc: o.Service, log: o.Log, ttl: o.SessionTTL, secure: o.Secure,
		byAccount: ratelimit.NewWindow(o.Redis, "signin:account", o.AccountAttempts, o.AttemptWindow),
		byAddress: ratelimit.NewWindow(o.Redis, "signin:address", o.AddressAttempts, o.AttemptWindow),
		clients:   o.Clients,
		mux:       http.NewServeMux(),
		pages:     parsePages(),
	}
	d.routes()
	return d
}

// Wrap serves the dashboard's paths and passes every other request to next
// (the API): one listener for both, as cmd/api runs them.
func (d *Dashboard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == Prefix || strings.HasPrefix(r.URL.Path, Prefix+"/") {
			d.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// csp allows this origin's script and stylesheet only: no inline script or
// style, no outside asset, forms post here only.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// maxForm bounds a form body: the largest, dispute evidence, is well under.
const maxForm = 64 << 10

// ServeHTTP is every dashboard request's edge: security headers, a body
// limit, text-only input and panic recovery, then the route.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if d.secure {
		h.Set("Strict-Transport-Security", "max-age=63072000; includeSubDomains")
	}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			d.log.ErrorContext(r.Context(), "dashboard panic", "path", r.URL.Path, "panic", p)
			d.message(w, r, http.StatusInternalServerError, "Something went wrong", "Please try again in a moment.")
		}
	}()
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if r.Method == http.MethodPost {
		if err := r.ParseForm(); err != nil {
			d.message(w, r, http.StatusBadRequest, "Invalid request", "The form could not be read.")
			return
		}
	}
	// PostgreSQL refuses text that is not UTF-8 or holds NUL; refuse it
	// here, as the API's gate does, rather than answer a 500.
	if !validText(r.URL.Path) {
		d.notFound(w, r) // no page has such a path, as the API's gate answers
		return
	}
	if !textOnly(r) {
		d.message(w, r, http.StatusBadRequest, "Invalid request", "The request holds text that is not valid UTF-8.")
		return
	}
	d.mux.ServeHTTP(w, r)
}

func validText(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// textOnly reports whether every query and form name and value is text.
func textOnly(r *http.Request) bool {
	ok := validText
	for _, vals := range []map[string][]string{r.URL.Query(), r.PostForm} {
		for k, vs := range vals {
			if !ok(k) {
				return false
			}
			for _, v := range vs {
				if !ok(v) {
					return false
				}
			}
		}
	}
	return true
}

// idPattern is what an object id looks like; anything else in an id's
// place is not found, without a query.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_]{1,100}$`)

// request is one signed-in request: its session and the scope (merchant
// and the page's mode) every read and change is made in.
type request struct {
	w    http.ResponseWriter
	r    *http.Request
	ctx  context.Context
	sess payments.DashboardSession
	sc   payments.Scope
	tok  string // the session's cookie token, for sign-out
	loc  *time.Location
}

// base is the path prefix of the request's mode: /dashboard (live) or
// /dashboard/test.
func (rq *request) base() string { return modeBase(rq.sc.Live) }

func modeBase(live bool) string {
	if live {
		return Prefix
	}
	return Prefix + "/test"
}

// handler serves one signed-in page.
type handler func(d *Dashboard, rq *request)

// page registers a signed-in route in both modes: live under /dashboard,
// test under /dashboard/test (Stripe's layout), so a link always says
// which mode it shows. POST routes change things: they need the form's
// CSRF token and an admin.
func (d *Dashboard) page(method, path string, h handler) {
	for _, live := range []bool{true, false} {
		d.mux.HandleFunc(method+" "+modeBase(live)+path, func(w http.ResponseWriter, r *http.Request) {
			d.serve(w, r, live, method == http.MethodPost, h)
		})
	}
}

func (d *Dashboard) serve(w http.ResponseWriter, r *http.Request, live, change bool, h handler) {
	tok := sessionToken(r)
	sess, err := d.svc.DashboardSession(r.Context(), tok)
	if errors.Is(err, payments.ErrNoSession) {
		if tok != "" {
			d.clearSession(w)
		}
		if r.Method == http.MethodGet {
			http.Redirect(w, r, Prefix+"/login?next="+urlQueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		d.message(w, r, http.StatusUnauthorized, "Signed out", "Your session has ended. Sign in again to continue.")
		return
	}
	if err != nil {
		d.internal(w, r, "load dashboard session", err)
		return
	}
	rq := &request{w: w, r: r, ctx: r.Context(), sess: sess, tok: tok,
		sc: payments.Scope{MerchantID: sess.User.MerchantID, Live: live}, loc: viewerZone(r)}
	if change {
		if !sess.CheckCSRF(r.PostFormValue("csrf_token")) {
			d.message(w, r, http.StatusForbidden, "Request refused", "The form was out of date or did not come from this dashboard. Reload the page and try again.")
			return
		}
		if !sess.User.CanChange() {
			d.forbidden(rq)
			return
		}
	}
	h(d, rq)
}

// viewerZone is the browser's time zone, which the page's script keeps in
// a cookie; UTC until it has.
func viewerZone(r *http.Request) *time.Location {
	if c, err := r.Cookie("dash_tz"); err == nil && len(c.Value) < 64 {
		if loc, err := time.LoadLocation(c.Value); err == nil {
			return loc
		}
	}
	return time.UTC
}

// ---- rendering ----

// view is what every signed-in page's layout reads.
type view struct {
	Title   string
	Section string // the nav entry to mark current
	Live    bool
	Base    string // /dashboard or /dashboard/test
	Switch  string // the same section in the other mode
	User    payments.User
	CSRF    string
	Loc     *time.Location
	Notice  string // a change went through
	Error   string // a change was refused: the API's message
	Code    string // and its code
	Status  int
	Data    any
}

func (rq *request) view(title, section string, data any) *view {
	other := modeBase(!rq.sc.Live)
	if section != "home" {
		other += "/" + section
	}
	return &view{Title: title, Section: section, Live: rq.sc.Live, Base: rq.base(), Switch: other,
		User: rq.sess.User, CSRF: rq.sess.CSRFToken, Loc: rq.loc, Data: data, Status: http.StatusOK}
}

// fail puts a refused change's code and message on the view.
func (v *view) fail(err error) *view {
	var pe *payments.Error
	if errors.As(err, &pe) {
		v.Error, v.Code, v.Status = pe.Msg, string(pe.Code), statusOf(pe.Code)
	}
	return v
}

// statusOf is the HTTP status of a refused change: the API's, from its
// one table.
func statusOf(c payments.Code) int { return httpapi.StatusOf(c) }

func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	t, ok := d.pages[name]
	if !ok {
		panic("dashboard: no template " + name)
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, name, data); err != nil {
		d.log.ErrorContext(r.Context(), "render dashboard page", "page", name, "error", err)
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString("<!doctype html><title>Error</title><p>Something went wrong.</p>")
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// show renders a signed-in page with its view's status.
func (d *Dashboard) show(rq *request, name string, v *view) {
	d.render(rq.w, rq.r, v.Status, name, v)
}

// messageView is a page with a title and a sentence: errors, 403, 404.
type messageView struct {
	Title, Message string
	Home           string
}

func (d *Dashboard) message(w http.ResponseWriter, r *http.Request, status int, title, msg string) {
	d.render(w, r, status, "message.html", messageView{Title: title, Message: msg, Home: Prefix})
}

func (d *Dashboard) notFound(w http.ResponseWriter, r *http.Request) {
	d.message(w, r, http.StatusNotFound, "Page not found", "There is nothing at this address in your dashboard.")
}

func (d *Dashboard) forbidden(rq *request) {
	d.message(rq.w, rq.r, http.StatusForbidden, "Not allowed", "Your role is viewer: you can see everything in this dashboard but not change it. Ask an admin of your account.")
}

// internal answers an unexpected failure; the cause is logged, never shown.
func (d *Dashboard) internal(w http.ResponseWriter, r *http.Request, what string, err error) {
	d.log.ErrorContext(r.Context(), what, "path", r.URL.Path, "error", err)
	d.message(w, r, http.StatusInternalServerError, "Something went wrong", "Please try again in a moment.")
}

// audit logs a change made from the dashboard: who, for which merchant and
// mode, what, on which object (never a secret).
func (d *Dashboard) audit(rq *request, action, id string) {
	d.log.InfoContext(rq.ctx, "dashboard change", "action", action, "object", id, "user", rq.sess.User.ID,
		"merchant_id", rq.sc.MerchantID, "livemode", rq.sc.Live)
}

// lookupFailed answers a failed read of one object: not found (another
// merchant's id included: it is not found in this scope) or internal.
func (d *Dashboard) lookupFailed(rq *request, what string, err error) {
	if payments.ErrorCode(err) != "" {
		d.notFound(rq.w, rq.r)
		return
	}
	d.internal(rq.w, rq.r, what, err)
}
