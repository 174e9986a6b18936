// Package hosted serves the pages customers see: the sandbox processor's
// hosted checkout, its embedded-payment confirm endpoint and JS client, and
// an example page. Pages use no outside assets.
package hosted

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"paysvc/internal/payments"
	"paysvc/internal/processor"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/*.js
var staticFS embed.FS

var pages = template.Must(template.ParseFS(templateFS, "templates/*.html"))

// Processor is what the pages need from the processor they belong to: it
// charges the card and records the outcome (as a processor event, applied
// before it returns) so that the page can answer at once. The sandbox's
// Cards is one.
type Processor interface {
	// PayCheckout returns the domain's errors, payments.ErrSessionClosed
	// among them.
	PayCheckout(ctx context.Context, sessionID string, p payments.CheckoutPayment, card string) (processor.Outcome, error)
	// ConfirmPayment returns processor.ErrBadClientCredentials or
	// payment_not_found for a caller that may not confirm the payment, and
	// payments.ErrAlreadyPaid for a payment that succeeded before.
	ConfirmPayment(ctx context.Context, id, publishableKey, clientSecret, card string) (processor.Outcome, error)
	// SubscribeCheckout saves the card of a subscription session and, when
	// chargeNow (no trial), charges the first period with it; the outcome
	// is recorded before it returns, the subscription created on success.
	SubscribeCheckout(ctx context.Context, sessionID string, p payments.CheckoutPayment, card string, chargeNow bool) (processor.Outcome, error)
	// SaveCard decides whether a new card can be saved and returns the
	// card to record (never its number), nil when it declined.
	SaveCard(card string, expMonth, expYear int) (processor.Outcome, *payments.SavedCard)
}

// Pages serves the hosted pages.
type Pages struct {
	svc     *payments.Service
	sandbox Processor
	log     *slog.Logger
}

// New returns the hosted pages. They read the time of each session's
// merchant and mode on svc's Clock.
func New(svc *payments.Service, sb Processor, log *slog.Logger) *Pages {
	if log == nil {
		log = slog.Default()
	}
	return &Pages{svc: svc, sandbox: sb, log: log}
}

// Register adds the pages' routes to r.
func (p *Pages) Register(r gin.IRoutes) {
	r.GET("/checkout/:id", p.checkoutPage)
	r.POST("/checkout/:id", p.checkoutPay)
	r.GET("/portal/:token", p.portalPage)
	r.POST("/portal/:token/cancel", p.portalCancel)
	r.POST("/portal/:token/card", p.portalCard)
	r.GET("/sandbox/js/v1.js", static("static/v1.js"))
	r.GET("/sandbox/js/example.js", static("static/example.js"))
	r.GET("/sandbox/example", p.examplePage)
	r.POST("/sandbox/v1/payment_intents/:id/confirm", p.confirm)
	r.OPTIONS("/sandbox/v1/payment_intents/:id/confirm", preflight)
}

// pageCSP allows only this origin's scripts and inline styles; forms may
// post here and redirect to the merchant's https success_url.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; form-action 'self' https:; base-uri 'none'; frame-ancestors 'none'"

func render(c *gin.Context, status int, name string, data any) {
	var buf bytes.Buffer
	if err := pages.ExecuteTemplate(&buf, name, data); err != nil {
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString("<!doctype html><title>Error</title><p>Something went wrong.</p>")
	}
	c.Header("Content-Security-Policy", pageCSP)
	c.Header("Referrer-Policy", "no-referrer")
	c.Data(status, "text/html; charset=utf-8", buf.Bytes())
}

func static(name string) gin.HandlerFunc {
	body, err := staticFS.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return func(c *gin.Context) {
		c.Header("Cache-Control", "public, max-age=300")
		c.Data(http.StatusOK, "text/javascript; charset=utf-8", body)
	}
}

type message struct {
	Title, Message, Link, LinkText string
}

func (p *Pages) message(c *gin.Context, status int, m message) {
	render(c, status, "message.html", m)
}

// Reject answers a request to one of the pages that the API's edge refused
// before the page saw it (text that is not UTF-8, a body over the limit):
// JSON, as the confirm endpoint answers, to a JSON request; else a page.
func (p *Pages) Reject(c *gin.Context, status int, msg string) {
	if c.ContentType() == "application/json" {
		cors(c)
		c.JSON(status, confirmResponse{Error: &confirmError{Code: "invalid_request", Message: msg}})
		return
	}
	p.message(c, status, message{Title: "Invalid request", Message: msg})
}

// formatMoney shows minor units as a price: 1999 usd → "USD 19.99".
func formatMoney(amount int64, currency string) string {
	d := payments.MinorUnits(currency)
	if d == 0 {
		return fmt.Sprintf("%s %d", strings.ToUpper(currency), amount)
	}
	scale := int64(math.Pow10(d))
	return fmt.Sprintf("%s %d.%0*d", strings.ToUpper(currency), amount/scale, d, amount%scale)
}

// maxFormText bounds the checkout form's free-text fields, in characters;
// the page's inputs carry the same maxlength. (The email's bound is
// ValidEmail's.)
var maxFormText = map[string]int{
	"name": 200, "ship_line1": 200, "ship_line2": 200, "ship_city": 100, "ship_postal_code": 20,
	"bill_line1": 200, "bill_city": 100, "bill_postal_code": 20,
}

// checkLengths records a field error for each of fields that is longer
// than maxFormText allows.
func checkLengths(errs map[string]string, fields map[string]string) {
	for field, val := range fields {
		if max := maxFormText[field]; utf8.RuneCountInString(val) > max {
			errs[field] = fmt.Sprintf("Use at most %d characters.", max)
		}
	}
}

// checkoutForm holds what the customer typed, to re-render after an error.
// The card number and CVC are never echoed back, nor is a card number typed
// into another field (scrubbed).
type checkoutForm struct {
	Email, Name                                             string
	ShipLine1, ShipLine2, ShipCity, ShipPostal, ShipCountry string
	Option                                                  string
	BillLine1, BillCity, BillPostal, BillCountry            string
	ExpMonth, ExpYear                                       string
}

// scrubbed is f with every field that holds what may be a card number
// emptied: a page that echoed it would put the number in a response.
func (f checkoutForm) scrubbed() checkoutForm {
	for _, v := range []*string{&f.Email, &f.Name, &f.ShipLine1, &f.ShipLine2, &f.ShipCity, &f.ShipPostal, &f.ShipCountry,
		&f.Option, &f.BillLine1, &f.BillCity, &f.BillPostal, &f.BillCountry, &f.ExpMonth, &f.ExpYear} {
		if mayHoldCardNumber(*v) {
			*v = ""
		}
	}
	return f
}

// mayHoldCardNumber reports whether s has a run of 12 or more digits, the
// spaces and dashes between them not counted: the shortest card number.
func mayHoldCardNumber(s string) bool {
	run := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			if run++; run >= 12 {
				return true
			}
		case (c == ' ' || c == '-') && run > 0:
		default:
			run = 0
		}
	}
	return false
}

type itemView struct {
	Name     string
	Quantity int64
	Amount   string
}

type optionView struct {
	Label, Amount, Total string
}

// planView is what a subscription session's page says of the plan: its
// terms ("14 days free, then USD 15.00 every month") and what is charged
// today and when the first charge comes.
type planView struct {
	Name, Terms, FirstCharge string
	Trial                    bool
}

type checkoutView struct {
	Title, Merchant, ID string
	Plan                *planView
	Items               []itemView
	Fees, Total         string
	Shipping, Billing   bool
	Countries           []string
	Options             []optionView
	CancelURL           string
	Form                checkoutForm
	Errs                map[string]string
	Error               string
}

func (p *Pages) view(cs payments.CheckoutSession, now time.Time, f checkoutForm, errs map[string]string, msg string) checkoutView {
	v := checkoutView{
		Title: "Checkout", Merchant: cs.MerchantName, ID: cs.ID, Total: formatMoney(cs.AmountTotal, cs.Currency),
		Shipping: cs.CollectShipping, Billing: cs.BillingAddressCollection != nil && *cs.BillingAddressCollection == "required",
		Countries: cs.ShippingCountries, CancelURL: cs.CancelURL, Form: f.scrubbed(), Errs: errs, Error: msg,
	}
	for _, li := range cs.LineItems {
		v.Items = append(v.Items, itemView{Name: li.Name, Quantity: li.Quantity, Amount: formatMoney(li.Amount, li.Currency)})
	}
	if cs.PassFees && cs.AmountTotal > cs.AmountSubtotal { // a trial: nothing due, no fee
		v.Fees = formatMoney(cs.AmountTotal-cs.AmountSubtotal, cs.Currency)
	}
	// The page has no script, so each option states the total it leads to.
	for _, o := range cs.ShippingOptions {
		total := cs.TotalWith(cs.MerchantPlan, o.Amount)
		v.Options = append(v.Options, optionView{Label: o.Label, Amount: formatMoney(o.Amount, cs.Currency), Total: formatMoney(total, cs.Currency)})
	}
	if f.Email == "" && cs.CustomerEmail != nil {
		v.Form.Email = *cs.CustomerEmail
	}
	if cs.Mode == payments.ModeSubscription {
		v.Title, v.Plan = "Subscribe", p.plan(cs, now)
	}
	return v
}

// plan describes a subscription session's one recurring line. Each period
// costs the line's amount, grossed up like the first when fees are passed
// on; a trial's first charge comes when it ends.
func (p *Pages) plan(cs payments.CheckoutSession, now time.Time) *planView {
	if len(cs.LineItems) != 1 || cs.LineItems[0].Recurring == nil {
		return nil
	}
	li := cs.LineItems[0]
	iv, err := payments.NewInterval(li.Recurring.Interval, li.Recurring.IntervalCount)
	if err != nil {
		return nil
	}
	period := li.Amount
	if cs.PassFees {
		period = payments.GrossUp(cs.MerchantPlan, cs.Currency, period)
	}
	every := formatMoney(period, cs.Currency) + " every " + iv.Phrase()
	v := &planView{Name: li.Name, Terms: strings.ToUpper(every[:1]) + every[1:], FirstCharge: "Charged today: " + formatMoney(period, cs.Currency)}
	if d := cs.TrialPeriodDays; d != nil && *d > 0 {
		days := "days"
		if *d == 1 {
			days = "day"
		}
		first := now.Add(time.Duration(*d) * 24 * time.Hour)
		v.Trial = true
		v.Terms = fmt.Sprintf("%d %s free, then %s", *d, days, every)
		v.FirstCharge = "Nothing is charged today. First charge of " + formatMoney(period, cs.Currency) + " on " + first.UTC().Format("January 2, 2006") + "."
	}
	return v
}

// closedMessage is the 410 page of a session that can no longer be paid.
func closedMessage(status string, cs payments.CheckoutSession) message {
	if status == payments.SessionComplete && cs.Mode == payments.ModeSubscription {
		return message{Title: "Subscribed", Message: "This subscription checkout is complete. Nothing more is charged here.",
			Link: successURL(cs), LinkText: "Return to the shop"}
	}
	if status == payments.SessionComplete {
		return message{Title: "Payment complete", Message: "This checkout session has already been paid. Nothing more is charged.",
			Link: successURL(cs), LinkText: "Return to the shop"}
	}
	return message{Title: "Checkout expired", Message: "This checkout session has expired. Return to the shop to start again.",
		Link: cs.CancelURL, LinkText: "Return to the shop"}
}

func successURL(cs payments.CheckoutSession) string {
	return strings.ReplaceAll(cs.SuccessURL, "{CHECKOUT_SESSION_ID}", cs.ID)
}

func (p *Pages) session(c *gin.Context) (payments.CheckoutSession, bool) {
	cs, err := p.svc.SessionForCheckout(c.Request.Context(), c.Param("id"))
	if err != nil {
		if payments.ErrorCode(err) == payments.SessionNotFound {
			p.message(c, http.StatusNotFound, message{Title: "Checkout not found", Message: "This checkout link is not valid."})
		} else {
			p.log.ErrorContext(c.Request.Context(), "load checkout session", "error", err)
			p.message(c, http.StatusInternalServerError, message{Title: "Something went wrong", Message: "Please try again in a moment."})
		}
		return cs, false
	}
	if status := cs.StatusAt(p.svc.Now(c.Request.Context(), cs.Scope())); status != payments.SessionOpen {
		p.message(c, http.StatusGone, closedMessage(status, cs))
		return cs, false
	}
	return cs, true
}

func (p *Pages) checkoutPage(c *gin.Context) {
	cs, ok := p.session(c)
	if !ok {
		return
	}
	render(c, http.StatusOK, "checkout.html", p.view(cs, p.svc.Now(c.Request.Context(), cs.Scope()), checkoutForm{}, nil, ""))
}

var digits = regexp.MustCompile(`^[0-9]+$`)

// checkCard reads the card fields of a checkout or portal form (the number
// and CVC from the post, the expiry from f) and adds a message to errs for
// each that is not valid at now: the number without spaces or dashes, and
// the expiry as a month and a four-digit year.
func checkCard(c *gin.Context, f checkoutForm, now time.Time, errs map[string]string) (number string, month, year int) {
	number = strings.NewReplacer(" ", "", "-", "").Replace(c.PostForm("card_number"))
	if !digits.MatchString(number) || len(number) < 12 || len(number) > 19 {
		errs["card_number"] = "Enter a card number of 12 to 19 digits."
	}
	m, merr := strconv.Atoi(f.ExpMonth)
	y, yerr := strconv.Atoi(f.ExpYear)
	if y >= 0 && y < 100 {
		y += 2000
	}
	switch {
	case merr != nil || m < 1 || m > 12:
		errs["exp_month"] = "Enter a month from 1 to 12."
	case yerr != nil || y < now.Year() || y > now.Year()+20 || (y == now.Year() && m < int(now.Month())):
		errs["exp_year"] = "The card has expired or the year is not valid."
	}
	if cvc := c.PostForm("cvc"); !digits.MatchString(cvc) || len(cvc) < 3 || len(cvc) > 4 {
		errs["cvc"] = "Enter the 3 or 4 digit security code."
	}
	return number, m, y
}

// parseCheckout reads and checks the form; errs maps field → message.
func (p *Pages) parseCheckout(c *gin.Context, cs payments.CheckoutSession) (checkoutForm, string, payments.CheckoutPayment, map[string]string) {
	v := func(k string) string { return strings.TrimSpace(c.PostForm(k)) }
	f := checkoutForm{
		Email: v("email"), Name: v("name"), ShipLine1: v("ship_line1"), ShipLine2: v("ship_line2"), ShipCity: v("ship_city"),
		ShipPostal: v("ship_postal_code"), ShipCountry: strings.ToUpper(v("ship_country")), Option: v("shipping_option"),
		BillLine1: v("bill_line1"), BillCity: v("bill_city"), BillPostal: v("bill_postal_code"), BillCountry: strings.ToUpper(v("bill_country")),
		ExpMonth: v("exp_month"), ExpYear: v("exp_year"),
	}
	errs := map[string]string{}
	if !payments.ValidEmail(f.Email) { // the API's rule: the address is returned by the API later
		errs["email"] = "Enter a valid email address."
	}
	checkLengths(errs, map[string]string{"name": f.Name})
	if f.Name == "" {
		errs["name"] = "Enter the name on the card."
	}
	// The card expires on the shop's clock.
	card, m, y := checkCard(c, f, p.svc.Now(c.Request.Context(), cs.Scope()), errs)
	pay := payments.CheckoutPayment{Email: f.Email, Name: f.Name, ExpMonth: m, ExpYear: y}
	if cs.CollectShipping {
		addr := payments.Address{Name: f.Name, Line1: f.ShipLine1, Line2: f.ShipLine2, City: f.ShipCity, PostalCode: f.ShipPostal, Country: f.ShipCountry}
		checkLengths(errs, map[string]string{"ship_line1": addr.Line1, "ship_line2": addr.Line2, "ship_city": addr.City, "ship_postal_code": addr.PostalCode})
		for field, val := range map[string]string{"ship_line1": addr.Line1, "ship_city": addr.City, "ship_postal_code": addr.PostalCode} {
			if val == "" {
				errs[field] = "Required."
			}
		}
		if !allowedCountry(cs.ShippingCountries, addr.Country) {
			errs["ship_country"] = "Choose a country this shop ships to."
		}
		var opt payments.ShippingOption
		if len(cs.ShippingOptions) > 0 {
			i, err := strconv.Atoi(f.Option)
			if err != nil || i < 0 || i >= len(cs.ShippingOptions) {
				errs["shipping_option"] = "Choose a shipping method."
			} else {
				opt = cs.ShippingOptions[i]
			}
		}
		pay.Shipping = &payments.ShippingDetails{Address: addr, Option: opt}
	}
	if cs.BillingAddressCollection != nil && *cs.BillingAddressCollection == "required" {
		b := payments.Address{Name: f.Name, Line1: f.BillLine1, City: f.BillCity, PostalCode: f.BillPostal, Country: f.BillCountry}
		checkLengths(errs, map[string]string{"bill_line1": b.Line1, "bill_city": b.City, "bill_postal_code": b.PostalCode})
		if b.Line1 == "" {
			errs["bill_line1"] = "Required."
		}
		if b.City == "" || b.PostalCode == "" || len(b.Country) != 2 {
			errs["bill_city"] = "Enter the city, postal code and two-letter country."
		}
		pay.Billing = &b
	}
	return f, card, pay, errs
}

func allowedCountry(list []string, c string) bool {
	if len(c) != 2 {
		return false
	}
	if len(list) == 0 {
		return true
	}
	for _, l := range list {
		if l == c {
			return true
		}
	}
	return false
}

// declineMessages are what a customer reads for each decline code.
var declineMessages = map[string]string{
	"card_declined":      "Your card was declined.",
	"insufficient_funds": "Your card has insufficient funds.",
	"invalid_number":     "Your card number is invalid.",
}

func (p *Pages) checkoutPay(c *gin.Context) {
	cs, ok := p.session(c)
	if !ok {
		return
	}
	f, card, pay, errs := p.parseCheckout(c, cs)
	now := p.svc.Now(c.Request.Context(), cs.Scope())
	if len(errs) > 0 {
		render(c, http.StatusBadRequest, "checkout.html", p.view(cs, now, f, errs, "Please correct the highlighted fields."))
		return
	}
	var outcome processor.Outcome
	var err error
	if cs.Mode == payments.ModeSubscription {
		// A trial charges nothing now: the card is only saved.
		chargeNow := cs.TrialPeriodDays == nil || *cs.TrialPeriodDays == 0
		outcome, err = p.sandbox.SubscribeCheckout(c.Request.Context(), cs.ID, pay, card, chargeNow)
	} else {
		outcome, err = p.sandbox.PayCheckout(c.Request.Context(), cs.ID, pay, card)
	}
	var closed payments.ErrSessionClosed
	switch {
	case errors.As(err, &closed):
		p.message(c, http.StatusGone, closedMessage(closed.Status, cs))
	case err != nil:
		p.log.ErrorContext(c.Request.Context(), "record checkout payment", "session", cs.ID, "error", err)
		p.message(c, http.StatusInternalServerError, message{Title: "Something went wrong", Message: "Your card was not charged. Please try again."})
	case !outcome.Succeeded:
		render(c, http.StatusPaymentRequired, "checkout.html", p.view(cs, now, f, nil, declineMessages[outcome.DeclineCode]+" Try another card."))
	default:
		c.Redirect(http.StatusSeeOther, successURL(cs))
	}
}

func (p *Pages) examplePage(c *gin.Context) {
	render(c, http.StatusOK, "example.html", message{Title: "Embedded payment example"})
}

// The confirm endpoint is called from merchants' pages on other origins and
// is authenticated by the publishable key and client secret, not cookies,
// so any origin may call it.
func cors(c *gin.Context) {
	c.Header("Access-Control-Allow-Origin", "*")
	c.Header("Access-Control-Allow-Methods", "POST")
	c.Header("Access-Control-Allow-Headers", "Content-Type")
	c.Header("Access-Control-Max-Age", "600")
}

func preflight(c *gin.Context) {
	cors(c)
	c.Status(http.StatusNoContent)
}

type confirmRequest struct {
	PublishableKey string `json:"publishable_key"`
	ClientSecret   string `json:"client_secret"`
	CardNumber     string `json:"card_number"`
}

type confirmError struct {
	Code        string `json:"code"`
	DeclineCode string `json:"decline_code,omitempty"`
	Message     string `json:"message"`
}

type confirmResponse struct {
	ID     string        `json:"id,omitempty"`
	Status string        `json:"status,omitempty"`
	Error  *confirmError `json:"error,omitempty"`
}

func (p *Pages) confirm(c *gin.Context) {
	cors(c)
	var req confirmRequest
	body, err := io.ReadAll(c.Request.Body)
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		err = dec.Decode(&req)
	}
	if err != nil {
		c.JSON(http.StatusBadRequest, confirmResponse{Error: &confirmError{Code: "invalid_request", Message: "Send JSON with publishable_key, client_secret and card_number."}})
		return
	}
	ctx := c.Request.Context()
	unauthorized := confirmResponse{Error: &confirmError{Code: "unauthorized", Message: "Invalid publishable key or client secret."}}
	id := c.Param("id")
	outcome, err := p.sandbox.ConfirmPayment(ctx, id, req.PublishableKey, req.ClientSecret, req.CardNumber)
	if payments.ErrorCode(err) == payments.PaymentNotFound || errors.Is(err, processor.ErrBadClientCredentials) {
		c.JSON(http.StatusUnauthorized, unauthorized)
		return
	}
	status := payments.IntentSucceeded
	if !outcome.Succeeded {
		status = payments.IntentRequiresPaymentMethod
	}
	switch {
	case errors.Is(err, payments.ErrAlreadyPaid):
		c.JSON(http.StatusOK, confirmResponse{ID: c.Param("id"), Status: payments.IntentSucceeded})
	case err != nil:
		p.log.ErrorContext(ctx, "confirm payment", "payment", id, "error", err)
		c.JSON(http.StatusInternalServerError, confirmResponse{Error: &confirmError{Code: "internal_error", Message: "Your card was not charged. Please try again."}})
	case !outcome.Succeeded:
		c.JSON(http.StatusPaymentRequired, confirmResponse{ID: id, Status: status, Error: &confirmError{
			Code: "card_declined", DeclineCode: outcome.DeclineCode, Message: declineMessages[outcome.DeclineCode]}})
	default:
		c.JSON(http.StatusOK, confirmResponse{ID: id, Status: status})
	}
}
