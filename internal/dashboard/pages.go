package dashboard

import (
	"net/http"
	"net/url"
	"strings"
	"time"

	"paysvc/internal/payments"
)

// pageSize is the rows of a list page.
const pageSize = 25

// eventsShown bounds a detail page's event timeline.
const eventsShown = 50

func (d *Dashboard) routes() {
	m := d.mux
	m.HandleFunc("GET "+Prefix+"/login", d.loginPage)
	m.HandleFunc("POST "+Prefix+"/login", d.login)
	m.HandleFunc("POST "+Prefix+"/logout", d.logout)
	m.HandleFunc("GET "+Prefix+"/assets/{name}", asset)
	// Everything else under /dashboard is an HTML 404, never the API's JSON.
	m.HandleFunc(Prefix+"/", d.notFound)
	// A trailing slash on a mode's home goes to it.
	m.HandleFunc("GET "+Prefix+"/{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, Prefix, http.StatusMovedPermanently) })
	m.HandleFunc("GET "+Prefix+"/test/{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix+"/test", http.StatusMovedPermanently)
	})

	d.page("GET", "", (*Dashboard).home)
	d.page("GET", "/payments", (*Dashboard).payments)
	d.page("GET", "/payments/{id}", (*Dashboard).payment)
	d.page("POST", "/payments/{id}/refund", (*Dashboard).refund)
	d.page("GET", "/refunds", (*Dashboard).refunds)
	d.page("GET", "/refunds/{id}", (*Dashboard).refundPage)
	d.page("GET", "/disputes", (*Dashboard).disputes)
	d.page("GET", "/disputes/{id}", (*Dashboard).dispute)
	d.page("POST", "/disputes/{id}/evidence", (*Dashboard).evidence)
	d.page("GET", "/customers", (*Dashboard).customers)
	d.page("GET", "/customers/{id}", (*Dashboard).customer)
	d.page("GET", "/products", (*Dashboard).products)
	d.page("GET", "/products/{id}", (*Dashboard).product)
	d.page("GET", "/events", (*Dashboard).events)
	d.page("GET", "/events/{id}", (*Dashboard).event)
	d.page("GET", "/apikeys", (*Dashboard).keys)
	d.page("POST", "/apikeys", (*Dashboard).createKey)
	d.page("POST", "/apikeys/{id}/revoke", (*Dashboard).revokeKey)
	d.webhookRoutes()
	d.subscriptionRoutes()
	d.page("GET", "/settings", (*Dashboard).settings)
}

func asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	body, err := staticFS.ReadFile("static/" + name)
	if err != nil || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	ct := "text/css; charset=utf-8"
	if strings.HasSuffix(name, ".js") {
		ct = "text/javascript; charset=utf-8"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(body)
}

// ---- lists ----

// list is a page of a list: its rows and the link to the next page.
type list[T any] struct {
	Items []T
	Next  string // the next page's URL, "" on the last
	Paged bool   // not the first page: offer the way back to it
}

// listParams reads ?starting_after; false (answered 404) when it is not
// an id.
func (d *Dashboard) listParams(rq *request) (payments.ListParams, bool) {
	lp := payments.ListParams{Limit: pageSize, StartingAfter: rq.r.URL.Query().Get("starting_after")}
	if lp.StartingAfter != "" && !idPattern.MatchString(lp.StartingAfter) {
		d.notFound(rq.w, rq.r)
		return lp, false
	}
	return lp, true
}

func pageOf[T any](rq *request, p payments.Page[T], id func(T) string) list[T] {
	l := list[T]{Items: p.Data, Paged: rq.r.URL.Query().Get("starting_after") != ""}
	if p.HasMore && len(p.Data) > 0 {
		l.Next = rq.r.URL.Path + "?starting_after=" + id(p.Data[len(p.Data)-1])
	}
	return l
}

// listPage serves a list: the page of fetch, rendered by tmpl.
func listPage[T any](d *Dashboard, rq *request, title, section, tmpl string,
	fetch func(payments.ListParams) (payments.Page[T], error), id func(T) string) {
	lp, ok := d.listParams(rq)
	if !ok {
		return
	}
	p, err := fetch(lp)
	if err != nil {
		// An unknown starting_after (another mode's id, a stale link).
		d.lookupFailed(rq, "list "+section, err)
		return
	}
	d.show(rq, tmpl, rq.view(title, section, pageOf(rq, p, id)))
}

// objectID reads the {id} of a detail page; false (answered 404) when it
// is not an id.
func (d *Dashboard) objectID(rq *request) (string, bool) {
	id := rq.r.PathValue("id")
	if !idPattern.MatchString(id) {
		d.notFound(rq.w, rq.r)
		return "", false
	}
	return id, true
}

// ---- home ----

type homeView struct {
	Balances []balanceView
	Charts   []chart
	Recent   []payments.PaymentIntent
}

type balanceView struct {
	Currency             string
	Available, Reserved  string
	Total                string
	NegativeAvailability bool
}

func (d *Dashboard) home(rq *request) {
	bals, err := d.svc.Balances(rq.ctx, rq.sc)
	if err != nil {
		d.internal(rq.w, rq.r, "read balances", err)
		return
	}
	var hv homeView
	for _, b := range bals {
		hv.Balances = append(hv.Balances, balanceView{
			Currency: strings.ToUpper(b.Currency), Available: formatMoney(b.Available(), b.Currency),
			Reserved: formatMoney(b.Reserved, b.Currency), Total: formatMoney(b.LedgerTotal, b.Currency),
			NegativeAvailability: b.Available() < 0,
		})
	}
	days, err := d.dailyVolume(rq.ctx, rq.sc)
	if err != nil {
		d.internal(rq.w, rq.r, "read daily volume", err)
		return
	}
	hv.Charts = charts(days)
	recent, err := d.svc.Payments(rq.ctx, rq.sc, payments.ListParams{Limit: 5})
	if err != nil {
		d.internal(rq.w, rq.r, "list recent payments", err)
		return
	}
	hv.Recent = recent.Data
	d.show(rq, "home.html", rq.view("Home", "home", hv))
}

// ---- payments and refunds ----

func (d *Dashboard) payments(rq *request) {
	listPage(d, rq, "Payments", "payments", "payments.html", func(lp payments.ListParams) (payments.Page[payments.PaymentIntent], error) {
		return d.svc.Payments(rq.ctx, rq.sc, lp)
	}, func(p payments.PaymentIntent) string { return p.ID })
}

type paymentView struct {
	Payment    payments.PaymentIntent
	Refunds    []payments.Refund
	Events     []eventSummary
	Refundable string // what remains refundable, formatted
	CanRefund  bool
	RefundKey  string // the refund form's idempotency key: a double submit refunds once
	Amount     string // the form's amount, kept after an error
}

func (d *Dashboard) paymentData(rq *request, id string) (*paymentView, error) {
	pi, err := d.svc.Payment(rq.ctx, rq.sc, id)
	if err != nil {
		return nil, err
	}
	refunds, err := d.svc.PaymentRefunds(rq.ctx, rq.sc, id)
	if err != nil {
		return nil, err
	}
	evs, err := d.svc.ObjectEvents(rq.ctx, rq.sc, id, eventsShown)
	if err != nil {
		return nil, err
	}
	left := pi.Refundable()
	return &paymentView{Payment: pi, Refunds: refunds, Events: summarizeAll(evs), Refundable: formatMoney(left, pi.Currency),
		CanRefund: pi.Status == payments.IntentSucceeded && left > 0 && pi.DisputeID == nil, RefundKey: randomToken()}, nil
}

func (d *Dashboard) payment(rq *request) {
	actionPage(d, rq, "Payment", "payments", "payment.html", "read payment", d.paymentData)
}

// actionPage shows the page of one object whose forms act on it (payment,
// dispute, subscription, endpoint): the view data comes from data, which
// the actions also use to show the page again with a refusal, and a change
// that redirected back here shows its notice.
func actionPage[T any](d *Dashboard, rq *request, title, section, tmpl, what string, data func(*request, string) (T, error)) {
	id, ok := d.objectID(rq)
	if !ok {
		return
	}
	dv, err := data(rq, id)
	if err != nil {
		d.lookupFailed(rq, what, err)
		return
	}
	v := rq.view(title+" "+id, section, dv)
	v.Notice = notices[rq.r.URL.Query().Get("done")]
	d.show(rq, tmpl, v)
}

// notices are the confirmations shown after a change redirects back.
var notices = map[string]string{
	"refund":   "Refund created. It is pending until the processor confirms it.",
	"evidence": "Evidence saved.",
	"submit":   "Evidence submitted. The dispute is under review.",
	"revoked":  "Key revoked. Requests with it now fail with key_revoked.",

	"endpoint_enabled":  "Endpoint enabled. Its failure count starts again; new events are delivered to it.",
	"endpoint_disabled": "Endpoint disabled. Nothing is delivered to it until you enable it.",
	"endpoint_deleted":  "Endpoint deleted.",
	"resent":            "Event sent again: this is its new delivery.",
	"sub_cancel_end":    "The subscription will end with its current period.",
	"sub_cancel_now":    "Subscription canceled.",
	"sub_resume":        "The scheduled cancellation is withdrawn; the subscription renews as before.",
}

// refund refunds a payment in full (no amount) or in part, with the API's
// rules and codes; the form's key makes a double submit one refund.
func (d *Dashboard) refund(rq *request) {
	id, ok := d.objectID(rq)
	if !ok {
		return
	}
	pv, err := d.paymentData(rq, id)
	if err != nil {
		d.lookupFailed(rq, "read payment", err)
		return
	}
	in := payments.RefundInput{PaymentIntent: &id}
	if key := rq.r.PostFormValue("refund_key"); key != "" && len(key) <= 64 {
		in.IdempotencyKey = "dashboard_" + key
	}
	if reason := rq.r.PostFormValue("reason"); reason != "" {
		in.Reason = &reason
	}
	pv.Amount = rq.r.PostFormValue("amount")
	if strings.TrimSpace(pv.Amount) != "" {
		amount, err := parseAmount(pv.Amount, pv.Payment.Currency)
		if err != nil {
			d.show(rq, "payment.html", rq.view("Payment "+id, "payments", pv).fail(err))
			return
		}
		in.Amount = &amount
	}
	re, err := d.svc.CreateRefund(rq.ctx, rq.sc, in)
	if err != nil {
		if payments.ErrorCode(err) == "" {
			d.internal(rq.w, rq.r, "create refund", err)
			return
		}
		d.show(rq, "payment.html", rq.view("Payment "+id, "payments", pv).fail(err))
		return
	}
	d.audit(rq, "refund.create", re.ID)
	http.Redirect(rq.w, rq.r, rq.base()+"/payments/"+id+"?done=refund", http.StatusSeeOther)
}

func (d *Dashboard) refunds(rq *request) {
	listPage(d, rq, "Refunds", "refunds", "refunds.html", func(lp payments.ListParams) (payments.Page[payments.Refund], error) {
		return d.svc.Refunds(rq.ctx, rq.sc, lp)
	}, func(r payments.Refund) string { return r.ID })
}

type refundView struct {
	Refund payments.Refund
	Events []eventSummary
}

func (d *Dashboard) refundPage(rq *request) {
	id, ok := d.objectID(rq)
	if !ok {
		return
	}
	r, err := d.svc.Refund(rq.ctx, rq.sc, id)
	if err != nil {
		d.lookupFailed(rq, "read refund", err)
		return
	}
	evs, err := d.svc.ObjectEvents(rq.ctx, rq.sc, id, eventsShown)
	if err != nil {
		d.internal(rq.w, rq.r, "read refund events", err)
		return
	}
	d.show(rq, "refund.html", rq.view("Refund "+id, "refunds", refundView{Refund: r, Events: summarizeAll(evs)}))
}

// ---- disputes ----

func (d *Dashboard) disputes(rq *request) {
	listPage(d, rq, "Disputes", "disputes", "disputes.html", func(lp payments.ListParams) (payments.Page[payments.Dispute], error) {
		return d.svc.Disputes(rq.ctx, rq.sc, lp)
	}, func(x payments.Dispute) string { return x.ID })
}

// evidenceFields are the evidence the dashboard's form offers: the ones a
// merchant most often has (the API takes all of Stripe's).
var evidenceFields = []struct{ Name, Label string }{
	{"customer_name", "Customer name"},
	{"customer_email_address", "Customer email"},
	{"product_description", "Product or service description"},
	{"shipping_tracking_number", "Shipping tracking number"},
	{"uncategorized_text", "Other evidence (explain why the payment is valid)"},
}

type disputeView struct {
	Dispute  payments.Dispute
	Events   []eventSummary
	Fields   []evidenceField
	CanEdit  bool
	Overdue  bool
	Evidence map[string]string
}

type evidenceField struct {
	Name, Label, Value string
	Long               bool
}

func (d *Dashboard) disputeData(rq *request, id string) (*disputeView, error) {
	dp, err := d.svc.Dispute(rq.ctx, rq.sc, id)
	if err != nil {
		return nil, err
	}
	evs, err := d.svc.ObjectEvents(rq.ctx, rq.sc, id, eventsShown)
	if err != nil {
		return nil, err
	}
	now := d.svc.Now(rq.ctx, rq.sc)
	dv := &disputeView{Dispute: dp, Events: summarizeAll(evs),
		Overdue: dp.EvidenceDueBy != nil && now.After(*dp.EvidenceDueBy)}
	dv.CanEdit = dp.Status == payments.DisputeNeedsResponse && dp.SubmittedAt == nil && !dv.Overdue
	for _, f := range evidenceFields {
		dv.Fields = append(dv.Fields, evidenceField{Name: f.Name, Label: f.Label, Value: dp.Evidence[f.Name], Long: f.Name == "uncategorized_text" || f.Name == "product_description"})
	}
	return dv, nil
}

func (d *Dashboard) dispute(rq *request) {
	actionPage(d, rq, "Dispute", "disputes", "dispute.html", "read dispute", d.disputeData)
}

// evidence saves the form's evidence, and submits it when asked: the API's
// POST /v1/disputes/{id}/evidence.
func (d *Dashboard) evidence(rq *request) {
	id, ok := d.objectID(rq)
	if !ok {
		return
	}
	dv, err := d.disputeData(rq, id)
	if err != nil {
		d.lookupFailed(rq, "read dispute", err)
		return
	}
	in := payments.EvidenceInput{Evidence: map[string]string{}}
	for i, f := range dv.Fields {
		v := strings.TrimSpace(rq.r.PostFormValue(f.Name))
		in.Evidence[f.Name] = v // empty removes the field, as in the API
		dv.Fields[i].Value = v
	}
	submit := rq.r.PostFormValue("submit") == "true"
	in.Submit = &submit
	if _, err := d.svc.UpdateEvidence(rq.ctx, rq.sc, id, in); err != nil {
		if payments.ErrorCode(err) == "" {
			d.internal(rq.w, rq.r, "update evidence", err)
			return
		}
		d.show(rq, "dispute.html", rq.view("Dispute "+id, "disputes", dv).fail(err))
		return
	}
	d.audit(rq, "dispute.evidence", id)
	done := "evidence"
	if submit {
		done = "submit"
	}
	http.Redirect(rq.w, rq.r, rq.base()+"/disputes/"+id+"?done="+done, http.StatusSeeOther)
}

// ---- customers, products, events ----

func (d *Dashboard) customers(rq *request) {
	listPage(d, rq, "Customers", "customers", "customers.html", func(lp payments.ListParams) (payments.Page[payments.Customer], error) {
		return d.svc.Customers(rq.ctx, rq.sc, lp)
	}, func(c payments.Customer) string { return c.ID })
}

type objectView[T any] struct {
	Object T
	Events []eventSummary
}

// detail serves a detail page of one object with its events.
func detail[T any](d *Dashboard, rq *request, title, section, tmpl string, read func(id string) (T, error)) {
	id, ok := d.objectID(rq)
	if !ok {
		return
	}
	obj, err := read(id)
	if err != nil {
		d.lookupFailed(rq, "read "+section, err)
		return
	}
	evs, err := d.svc.ObjectEvents(rq.ctx, rq.sc, id, eventsShown)
	if err != nil {
		d.internal(rq.w, rq.r, "read events", err)
		return
	}
	d.show(rq, tmpl, rq.view(title+" "+id, section, objectView[T]{Object: obj, Events: summarizeAll(evs)}))
}

func (d *Dashboard) customer(rq *request) {
	detail(d, rq, "Customer", "customers", "customer.html", func(id string) (payments.Customer, error) {
		return d.svc.Customer(rq.ctx, rq.sc, id)
	})
}

func (d *Dashboard) products(rq *request) {
	listPage(d, rq, "Products", "products", "products.html", func(lp payments.ListParams) (payments.Page[payments.Product], error) {
		return d.svc.Products(rq.ctx, rq.sc, lp)
	}, func(p payments.Product) string { return p.ID })
}

func (d *Dashboard) product(rq *request) {
	detail(d, rq, "Product", "products", "product.html", func(id string) (payments.Product, error) {
		return d.svc.Product(rq.ctx, rq.sc, id)
	})
}

type eventsView struct {
	list[eventSummary]
	Type  string // the filter as typed
	Types []string
}

// events lists the scope's events, filtered by ?type: one type, or a
// prefix ending in * ("charge.*"), as GET /v1/events takes it.
func (d *Dashboard) events(rq *request) {
	lp, ok := d.listParams(rq)
	if !ok {
		return
	}
	typ := strings.TrimSpace(rq.r.URL.Query().Get("type"))
	f := payments.EventFilter{ListParams: lp}
	v := rq.view("Events", "events", nil)
	if typ != "" {
		types, err := payments.ParseEventType(typ)
		if err != nil {
			v.fail(err)
		} else {
			f.Types = types
		}
	}
	p, err := d.svc.Events(rq.ctx, rq.sc, f)
	if err != nil {
		d.lookupFailed(rq, "list events", err)
		return
	}
	ev := eventsView{Type: typ, Types: payments.EventTypes,
		list: pageOf(rq, payments.Page[eventSummary]{Data: summarizeAll(p.Data), HasMore: p.HasMore}, func(e eventSummary) string { return e.ID })}
	if ev.Next != "" && typ != "" {
		ev.Next += "&type=" + url.QueryEscape(typ)
	}
	v.Data = ev
	d.show(rq, "events.html", v)
}

func (d *Dashboard) event(rq *request) {
	id, ok := d.objectID(rq)
	if !ok {
		return
	}
	e, err := d.svc.Event(rq.ctx, rq.sc, id)
	if err != nil {
		d.lookupFailed(rq, "read event", err)
		return
	}
	d.show(rq, "event.html", rq.view("Event "+id, "events", summarize(e)))
}

// ---- API keys ----

type keysView struct {
	Keys   []keyRow
	Secret *newKey // the key just created: its only showing
	Mode   string  // the create form's mode
	Expiry string  // and expiry, kept after an error
}

type keyRow struct {
	payments.APIKey
	Mode, Status string
}

type newKey struct {
	ID, Secret, Mode string
}

// keyExpiries are the create form's expiry choices (Stripe offers a date;
// a few durations cover the cases and need no date parsing).
var keyExpiries = map[string]time.Duration{"": 0, "1d": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "30d": 30 * 24 * time.Hour, "90d": 90 * 24 * time.Hour, "365d": 365 * 24 * time.Hour}

func (d *Dashboard) keysData(rq *request) (*keysView, error) {
	keys, err := d.svc.Keys(rq.ctx, rq.sc.MerchantID, rq.sc.Live)
	if err != nil {
		return nil, err
	}
	now := d.svc.Clock().Base()
	kv := &keysView{Mode: modeName(rq.sc.Live)}
	for _, k := range keys {
		status := "active"
		switch {
		case k.RevokedAt != nil:
			status = "revoked"
		case k.ExpiresAt != nil && !now.Before(*k.ExpiresAt):
			status = "expired"
		}
		kv.Keys = append(kv.Keys, keyRow{APIKey: k, Mode: modeName(k.Live), Status: status})
	}
	return kv, nil
}

func modeName(live bool) string {
	if live {
		return "live"
	}
	return "test"
}

func (d *Dashboard) keys(rq *request) {
	kv, err := d.keysData(rq)
	if err != nil {
		d.internal(rq.w, rq.r, "list keys", err)
		return
	}
	v := rq.view("API keys", "apikeys", kv)
	v.Notice = notices[rq.r.URL.Query().Get("done")]
	d.show(rq, "apikeys.html", v)
}

// createKey creates a key with the CLI's code and limits and shows its
// secret on this response only: it is never stored, so never shown again.
func (d *Dashboard) createKey(rq *request) {
	mode, expiry := rq.r.PostFormValue("mode"), rq.r.PostFormValue("expires_in")
	dur, okExpiry := keyExpiries[expiry]
	var err error
	switch {
	case mode != "test" && mode != "live":
		err = payments.Invalid("mode", "must be test or live")
	case !okExpiry:
		err = payments.Invalid("expires_in", "must be one of the choices offered")
	}
	var k payments.NewKey
	if err == nil {
		k, err = d.svc.CreateKey(rq.ctx, rq.sc.MerchantID, mode == "live", dur)
	}
	if err != nil && payments.ErrorCode(err) == "" {
		d.internal(rq.w, rq.r, "create key", err)
		return
	}
	// The page shows the new key's mode: the keys listed are that mode's.
	if err == nil {
		rq.sc.Live = k.Live
	}
	kv, lerr := d.keysData(rq)
	if lerr != nil {
		d.internal(rq.w, rq.r, "list keys", lerr)
		return
	}
	v := rq.view("API keys", "apikeys", kv)
	if err != nil {
		kv.Mode, kv.Expiry = mode, expiry
		d.show(rq, "apikeys.html", v.fail(err))
		return
	}
	d.audit(rq, "api_key.create", k.ID)
	kv.Secret = &newKey{ID: k.ID, Secret: k.Secret, Mode: modeName(k.Live)}
	v.Status = http.StatusCreated
	d.show(rq, "apikeys.html", v)
}

func (d *Dashboard) revokeKey(rq *request) {
	id, ok := d.objectID(rq)
	if !ok {
		return
	}
	if _, err := d.svc.RevokeMerchantKey(rq.ctx, rq.sc.MerchantID, id); err != nil {
		if payments.ErrorCode(err) != "" {
			d.notFound(rq.w, rq.r) // not one of this merchant's keys
			return
		}
		d.internal(rq.w, rq.r, "revoke key", err)
		return
	}
	d.audit(rq, "api_key.revoke", id)
	http.Redirect(rq.w, rq.r, rq.base()+"/apikeys?done=revoked", http.StatusSeeOther)
}
