package hosted

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"paysvc/internal/payments"
)

// The customer portal: /portal/{token}, the URL of POST
// /v1/subscriptions/{id}/portal-session. The token in the URL is the
// capability (payments.Service.Portal verifies it); the forms also carry a
// form token bound to a SameSite=Strict cookie (PortalFormToken), so a
// page on another site cannot post them even if it learned the URL.

// portalNonceCookie holds the browser's random nonce that form tokens are
// bound to. Its path covers every portal page of the browser.
const portalNonceCookie = "portal_nonce"

// portalNotices are the messages a page shows after a redirect from a
// successful form (post/redirect/get), keyed by its done query value.
var portalNotices = map[string]string{
	"card":           "Your card was updated. Future charges use the new card.",
	"retried":        "Your card was updated and the overdue payment was made.",
	"retry-declined": "Your card was updated, but the overdue payment was declined on it. Try another card.",
	"canceled":       "Your subscription is canceled at the end of the current period.",
}

type portalView struct {
	Title, Merchant, Token, FormToken string
	Plan, Price, Status, Card         string
	NextCharge, EndsOn, PeriodEnd     string
	ReturnURL                         string
	CanUpdateCard, CanCancel          bool
	// Overdue: the period ended unpaid (Subscription.PeriodOver), so
	// canceling ends the subscription at once.
	Overdue       bool
	Notice, Error string
	Form          checkoutForm
	Errs          map[string]string
}

// statusLabels are what a customer reads for each subscription status.
var statusLabels = map[string]string{
	payments.SubActive:            "Active",
	payments.SubTrialing:          "Free trial",
	payments.SubPastDue:           "Past due: the last payment failed",
	payments.SubUnpaid:            "Unpaid",
	payments.SubCanceled:          "Canceled",
	payments.SubIncomplete:        "Incomplete",
	payments.SubIncompleteExpired: "Expired",
	payments.SubPaused:            "Paused",
}

func day(t time.Time) string { return t.UTC().Format("January 2, 2006") }

func (p *Pages) portalView(c *gin.Context, v payments.PortalView, nonce string) portalView {
	sub := v.Subscription
	names := make([]string, 0, len(sub.Items))
	for _, it := range sub.Items {
		name := it.Name
		if it.Quantity > 1 {
			name = fmt.Sprintf("%s × %d", it.Name, it.Quantity)
		}
		names = append(names, name)
	}
	pv := portalView{
		Title: "Manage your subscription", Merchant: v.Session.MerchantName, Token: c.Param("token"),
		FormToken: p.svc.PortalFormToken(v, nonce), Plan: strings.Join(names, ", "),
		Price:  formatMoney(sub.PeriodAmount(), sub.Currency) + " every " + sub.Interval().Phrase(),
		Status: statusLabels[sub.Status], Card: "None on file", ReturnURL: v.Session.ReturnURL,
		PeriodEnd: day(sub.CurrentPeriodEnd), Notice: portalNotices[c.Query("done")],
	}
	if v.Card != nil {
		pv.Card = fmt.Sprintf("%s •••• %s", brandName(v.Card.Brand), v.Card.Last4)
	}
	ended := sub.Ended()
	pv.Overdue = !ended && sub.PeriodOver(p.svc.Now(c.Request.Context(), v.Session.Scope))
	switch {
	case ended:
	case sub.CancelAtPeriodEnd:
		pv.EndsOn = day(sub.CurrentPeriodEnd)
	case sub.Status == payments.SubUnpaid:
		// No more attempts: nothing is charged until the card is updated.
		pv.NextCharge = "None until the card is updated"
	case sub.Status != payments.SubIncomplete:
		// Renewals (and a trial's first charge) come at the period's end;
		// a past_due subscription's open charge is retried before that.
		pv.NextCharge = formatMoney(sub.NextChargeAmount(), sub.Currency) + " on " + day(sub.CurrentPeriodEnd)
		if sub.Status == payments.SubPastDue && sub.NextRetryAt != nil {
			pv.NextCharge = "Retried on " + day(*sub.NextRetryAt)
		}
	}
	pv.CanUpdateCard = !ended
	pv.CanCancel = !ended && !sub.CancelAtPeriodEnd && sub.Status != payments.SubIncomplete
	return pv
}

func brandName(b string) string {
	if b == "" {
		return "Card"
	}
	return strings.ToUpper(b[:1]) + b[1:]
}

// portalNonce returns the browser's nonce, setting a new one when it has
// none (or a malformed one).
func portalNonce(c *gin.Context) string {
	if n, err := c.Cookie(portalNonceCookie); err == nil && len(n) == 43 {
		if _, err := base64.RawURLEncoding.DecodeString(n); err == nil {
			return n
		}
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails on Linux
	n := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(c.Writer, &http.Cookie{
		Name: portalNonceCookie, Value: n, Path: "/portal/", HttpOnly: true,
		Secure: c.Request.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	return n
}

// portalFailed answers the errors of a portal page: a page with no data
// (404 for a token that verifies as nothing, 410 for an expired one), or a
// 500 page whose cause is logged.
func (p *Pages) portalFailed(c *gin.Context, err error) {
	switch {
	case errors.Is(err, payments.ErrPortalNotFound):
		p.message(c, http.StatusNotFound, message{Title: "Link not valid", Message: "This subscription link is not valid. Ask the shop for a new one."})
	case errors.Is(err, payments.ErrPortalExpired):
		p.message(c, http.StatusGone, message{Title: "Link expired", Message: "This subscription link has expired. Ask the shop for a new one."})
	default:
		p.log.ErrorContext(c.Request.Context(), "portal page", "error", err)
		p.message(c, http.StatusInternalServerError, message{Title: "Something went wrong", Message: "Please try again in a moment."})
	}
}

func (p *Pages) portalPage(c *gin.Context) {
	v, err := p.svc.Portal(c.Request.Context(), c.Param("token"))
	if err != nil {
		p.portalFailed(c, err)
		return
	}
	c.Header("Cache-Control", "no-store")
	render(c, http.StatusOK, "portal.html", p.portalView(c, v, portalNonce(c)))
}

// portalForm verifies the token and the form token of a posted portal
// form; on failure it has answered.
func (p *Pages) portalForm(c *gin.Context) (payments.PortalView, string, bool) {
	v, err := p.svc.Portal(c.Request.Context(), c.Param("token"))
	if err != nil {
		p.portalFailed(c, err)
		return v, "", false
	}
	nonce, _ := c.Cookie(portalNonceCookie)
	if !p.svc.ValidPortalForm(v, nonce, c.PostForm("form_token")) {
		p.message(c, http.StatusForbidden, message{Title: "Form expired", Message: "This form could not be verified. Reload the page and try again.",
			Link: "/portal/" + c.Param("token"), LinkText: "Reload the page"})
		return v, "", false
	}
	return v, nonce, true
}

// done redirects to the portal page with a notice (post/redirect/get, so a
// reload does not post again).
func done(c *gin.Context, notice string) {
	c.Redirect(http.StatusSeeOther, "/portal/"+c.Param("token")+"?done="+notice)
}

func (p *Pages) portalCancel(c *gin.Context) {
	_, nonce, ok := p.portalForm(c)
	if !ok {
		return
	}
	ctx, token := c.Request.Context(), c.Param("token")
	err := p.svc.PortalCancel(ctx, token)
	if payments.ErrorCode(err) == payments.ValidationError {
		// It ended since the page was shown: show it as it is now.
		v, verr := p.svc.Portal(ctx, token)
		if verr != nil {
			p.portalFailed(c, verr)
			return
		}
		pv := p.portalView(c, v, nonce)
		pv.Error = "This subscription has ended and can no longer be canceled."
		render(c, http.StatusConflict, "portal.html", pv)
		return
	}
	if err != nil {
		p.portalFailed(c, err)
		return
	}
	done(c, "canceled")
}

// portalCard replaces the subscription's card with a new one the sandbox
// saves; a declined card keeps the old one, and the page says so.
func (p *Pages) portalCard(c *gin.Context) {
	v, nonce, ok := p.portalForm(c)
	if !ok {
		return
	}
	ctx, token := c.Request.Context(), c.Param("token")
	f := checkoutForm{ExpMonth: strings.TrimSpace(c.PostForm("exp_month")), ExpYear: strings.TrimSpace(c.PostForm("exp_year"))}
	errs := map[string]string{}
	// The card expires on the shop's clock.
	number, m, y := checkCard(c, f, p.svc.Now(ctx, v.Session.Scope), errs)
	again := func(status int, msg string) {
		pv := p.portalView(c, v, nonce)
		pv.Form, pv.Errs, pv.Error = f.scrubbed(), errs, msg
		render(c, status, "portal.html", pv)
	}
	if len(errs) > 0 {
		again(http.StatusBadRequest, "Please correct the highlighted fields. Your card on file is unchanged.")
		return
	}
	outcome, card := p.sandbox.SaveCard(number, m, y)
	if card == nil {
		again(http.StatusPaymentRequired, declineMessages[outcome.DeclineCode]+" Your card on file is unchanged.")
		return
	}
	retried, paid, err := p.svc.PortalUpdateCard(ctx, token, *card)
	switch {
	case payments.ErrorCode(err) == payments.ValidationError:
		again(http.StatusConflict, "This subscription has ended; its card can no longer change.")
	case err != nil:
		p.portalFailed(c, err)
	case retried && paid:
		done(c, "retried")
	case retried:
		done(c, "retry-declined")
	default:
		done(c, "card")
	}
}
