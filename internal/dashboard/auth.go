package dashboard

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/ratelimit"
)

const (
	sessionCookie = "dash_session"
	// loginCookie carries the sign-in form's CSRF token (double submit):
	// there is no session yet to hold one, and a forged sign-in would put a
	// victim in the attacker's account.
	loginCookie = "dash_login"
)

func sessionToken(r *http.Request) string {
	if c, err := r.Cookie(sessionCookie); err == nil {
		return c.Value
	}
	return ""
}

func (d *Dashboard) cookie(name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: Prefix, MaxAge: maxAge,
		Secure: d.secure, HttpOnly: true, SameSite: http.SameSiteLaxMode}
}

func (d *Dashboard) clearSession(w http.ResponseWriter) {
	http.SetCookie(w, d.cookie(sessionCookie, "", -1))
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

// loginView is the sign-in page.
type loginView struct {
	Title, Email, Next, CSRF, Error string
}

// safeNext is where to go after signing in: a dashboard path only, never
// another site (an open redirect).
func safeNext(next string) string {
	if strings.HasPrefix(next, Prefix) && !strings.HasPrefix(next, "//") && !strings.Contains(next, "\\") {
		if u, err := url.Parse(next); err == nil && u.Host == "" && u.Scheme == "" {
			return next
		}
	}
	return Prefix
}

func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request) {
	if _, err := d.svc.DashboardSession(r.Context(), sessionToken(r)); err == nil {
		http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	d.showLogin(w, r, http.StatusOK, "", r.URL.Query().Get("next"), "")
}

func (d *Dashboard) showLogin(w http.ResponseWriter, r *http.Request, status int, email, next, msg string) {
	tok := randomToken()
	http.SetCookie(w, d.cookie(loginCookie, tok, 3600))
	d.render(w, r, status, "login.html", loginView{Title: "Sign in", Email: email, Next: safeNext(next), CSRF: tok, Error: msg})
}

// accountKey names an account's attempt counter without putting the email
// itself in Redis.
func accountKey(email string) string {
	h := sha256.Sum256([]byte(strings.ToLower(strings.TrimSpace(email))))
	return hex.EncodeToString(h[:16])
}

// badCredentials is the one answer to an unknown email and a wrong password.
const badCredentials = "Incorrect email or password."

func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	email, password, next := r.PostFormValue("email"), r.PostFormValue("password"), r.PostFormValue("next")
	c, err := r.Cookie(loginCookie)
	if err != nil || subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.PostFormValue("csrf_token"))) != 1 {
		d.showLogin(w, r, http.StatusForbidden, email, next, "The sign-in form expired. Please try again.")
		return
	}
	if email == "" || password == "" {
		d.showLogin(w, r, http.StatusBadRequest, email, next, "Enter your email and password.")
		return
	}
	// Every attempt spends one of the account's and one of the address's
	// budget before the password is checked, so guessing is bounded either
	// way. The account's counter is kept for unknown emails too: its answer
	// must not tell whether the email has an account.
	ctx := r.Context()
	for _, lim := range []struct {
		win *ratelimit.Window
		key string
	}{{d.byAddress, d.clients.Of(r)}, {d.byAccount, accountKey(email)}} {
		res, err := lim.win.Allow(ctx, lim.key)
		wait, ok := res.RetryAfter, res.Allowed
		if err != nil {
			// Without its counters, sign-in would be open to guessing:
			// refuse it until Redis is back (the API keys still work).
			d.log.ErrorContext(ctx, "sign-in rate limiter unavailable", "error", err)
			d.showLogin(w, r, http.StatusServiceUnavailable, email, next, "Sign-in is unavailable right now. Please try again in a minute.")
			return
		}
		if !ok {
			mins := int(wait.Round(time.Minute) / time.Minute)
			if mins < 1 {
				mins = 1
			}
			w.Header().Set("Retry-After", fmt.Sprint(int(wait.Seconds())+1))
			d.showLogin(w, r, http.StatusTooManyRequests, email, next,
				fmt.Sprintf("Too many sign-in attempts. Please try again in %d minute%s.", mins, plural(mins)))
			return
		}
	}
	tok, sess, err := d.svc.SignIn(ctx, email, password, d.ttl)
	if errors.Is(err, payments.ErrBadCredentials) {
		d.showLogin(w, r, http.StatusUnauthorized, email, next, badCredentials)
		return
	}
	if err != nil {
		d.internal(w, r, "sign in", err)
		return
	}
	_ = d.byAccount.Reset(ctx, accountKey(email))
	d.log.InfoContext(ctx, "dashboard sign-in", "user", sess.User.ID, "merchant_id", sess.User.MerchantID)
	http.SetCookie(w, d.cookie(sessionCookie, tok, int(time.Until(sess.ExpiresAt).Seconds())))
	http.SetCookie(w, d.cookie(loginCookie, "", -1))
	http.Redirect(w, r, safeNext(next), http.StatusSeeOther)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// logout ends the session. It needs the session's CSRF token (a forged
// sign-out is a nuisance) but not the admin role: viewers sign out too.
func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	tok := sessionToken(r)
	sess, err := d.svc.DashboardSession(r.Context(), tok)
	if err == nil && !sess.CheckCSRF(r.PostFormValue("csrf_token")) {
		d.message(w, r, http.StatusForbidden, "Request refused", "The form was out of date. Reload the page and try again.")
		return
	}
	if err == nil {
		if err := d.svc.SignOut(r.Context(), tok); err != nil {
			d.internal(w, r, "sign out", err)
			return
		}
	}
	d.clearSession(w)
	http.Redirect(w, r, Prefix+"/login", http.StatusSeeOther)
}
