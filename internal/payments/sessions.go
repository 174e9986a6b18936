package payments

import (
	"context"
	"fmt"
	"strings"
	"time"

	"paysvc/internal/processor"
)

// Session statuses (Stripe's vocabulary).
const (
	SessionOpen     = "open"
	SessionComplete = "complete"
	SessionExpired  = "expired"

	PaymentUnpaid            = "unpaid"
	PaymentPaid              = "paid"
	PaymentNoPaymentRequired = "no_payment_required"

	// A session sells once (payment) or starts a subscription.
	ModePayment      = "payment"
	ModeSubscription = "subscription"
)

// Input limits of a session.
const (
	maxLineItems   = 100
	maxQuantity    = 1000
	maxShippingOpt = 5
)

// LineItem is one priced line of a session, resolved at creation.
type LineItem struct {
	PriceID    *string `json:"price_id"`
	Name       string  `json:"name"`
	UnitAmount int64   `json:"unit_amount"`
	Currency   string  `json:"currency"`
	Quantity   int64   `json:"quantity"`
	Amount     int64   `json:"amount_total"`
	// Recurring is set on the one line of a subscription session: how often
	// its price bills, and the subscription product it belongs to (null
	// for an inline price).
	Recurring *LineRecurring `json:"recurring,omitempty"`
}

// LineRecurring is the recurring part of a subscription session's line.
type LineRecurring struct {
	Interval      string  `json:"interval"`
	IntervalCount int     `json:"interval_count"`
	Product       *string `json:"product"`
}

// ShippingOption is a delivery choice offered at checkout.
type ShippingOption struct {
	Label  string `json:"label"`
	Amount int64  `json:"amount"`
}

// Address is a postal address collected at checkout.
type Address struct {
	Name       string `json:"name,omitempty"`
	Line1      string `json:"line1"`
	Line2      string `json:"line2,omitempty"`
	City       string `json:"city"`
	PostalCode string `json:"postal_code"`
	State      string `json:"state,omitempty"`
	Country    string `json:"country"`
}

// ShippingDetails are the address and option the customer chose.
type ShippingDetails struct {
	Address Address        `json:"address"`
	Option  ShippingOption `json:"option"`
}

// CheckoutSession is a hosted checkout session.
type CheckoutSession struct {
	MerchantID               string // with Live, the session's Scope
	ID                       string
	Live                     bool
	Mode                     string // ModePayment ("" reads as it) or ModeSubscription
	TrialPeriodDays          *int   // subscription mode: the trial the subscription starts with
	Status                   string
	PaymentStatus            string
	URL                      string
	Currency                 string
	AmountSubtotal           int64
	AmountTotal              int64
	PassFees                 bool
	LineItems                []LineItem
	CustomerID               *string
	CustomerEmail            *string
	SuccessURL               string
	CancelURL                string
	CollectShipping          bool
	BillingAddressCollection *string
	ShippingCountries        []string
	ShippingOptions          []ShippingOption
	Shipping                 *ShippingDetails
	Billing                  *Address
	Metadata                 map[string]string
	PaymentIntentID          *string
	SubscriptionID           *string
	ExpiresAt                time.Time
	CompletedAt              *time.Time
	Created                  time.Time
	MerchantName             string // for the hosted page; set by SessionForCheckout
	MerchantPlan             Plan
}

// Scope returns the scope the session belongs to.
func (cs CheckoutSession) Scope() Scope { return Scope{MerchantID: cs.MerchantID, Live: cs.Live} }

// StatusAt is the session's status at now (its scope's time): an open
// session past its expiry is expired, even before the sweep marks it.
func (cs CheckoutSession) StatusAt(now time.Time) string {
	if cs.Status == SessionOpen && !now.Before(cs.ExpiresAt) {
		return SessionExpired
	}
	return cs.Status
}

// TotalWith is what the customer pays with a shipping amount (0 for none):
// the subtotal plus shipping, grossed up by plan's fee when the session
// passes fees on. Nothing due (a trial) stays nothing: no fee is taken
// where no charge is made.
func (cs CheckoutSession) TotalWith(plan Plan, shipping int64) int64 {
	total := cs.AmountSubtotal + shipping
	if cs.PassFees && total > 0 {
		total = GrossUp(plan, cs.Currency, total)
	}
	return total
}

// LineItemInput is a line of a session create body: price_id, or amount +
// currency + name; quantity always.
type LineItemInput struct {
	PriceID  *string `json:"price_id"`
	Amount   *int64  `json:"amount"`
	Currency *string `json:"currency"`
	Name     *string `json:"name"`
	Quantity *int64  `json:"quantity"`
}

// ShippingOptionInput is a shipping option of a session create body.
type ShippingOptionInput struct {
	Label  *string `json:"label"`
	Amount *int64  `json:"amount"`
}

// SessionInput is the body of POST /v1/payment-sessions.
type SessionInput struct {
	LineItems                []LineItemInput       `json:"line_items"`
	SuccessURL               *string               `json:"success_url"`
	CancelURL                *string               `json:"cancel_url"`
	CustomerID               *string               `json:"customer_id"`
	CustomerEmail            *string               `json:"customer_email"`
	PassFeesToCustomer       *bool                 `json:"pass_fees_to_customer"`
	Metadata                 MetadataInput         `json:"metadata"`
	CollectShippingAddress   *bool                 `json:"collect_shipping_address"`
	BillingAddressCollection *string               `json:"billing_address_collection"`
	ShippingCountries        []string              `json:"shipping_countries"`
	ShippingOptions          []ShippingOptionInput `json:"shipping_options"`
}

// checkRedirectURL applies the session URL rule: required, and https://
// with a host, else invalid_url.
func checkRedirectURL(field string, u *string) error {
	if u == nil || *u == "" {
		return Invalid(field, "is required")
	}
	if err := checkHTTPS(field, *u); err != nil {
		return Errorf(InvalidURL, "%s must be a URL starting with https://", field)
	}
	return nil
}

func (in *SessionInput) validate() error {
	if len(in.LineItems) == 0 {
		return Invalid("line_items", "must have at least 1 item")
	}
	if len(in.LineItems) > maxLineItems {
		return Invalid("line_items", "can have at most %d items", maxLineItems)
	}
	for i, li := range in.LineItems {
		f := fmt.Sprintf("line_items[%d]", i)
		custom := li.Amount != nil || li.Currency != nil || li.Name != nil
		switch {
		case li.PriceID != nil && custom:
			return Invalid(f, "must use either price_id or amount, currency and name, not both")
		case li.PriceID != nil:
			if !strings.HasPrefix(*li.PriceID, "price_") {
				return Invalid(f+".price_id", "must be a price id (price_…)")
			}
		case custom:
			if err := checkAmount(f+".amount", li.Amount); err != nil {
				return err
			}
			if _, err := checkCurrency(f+".currency", li.Currency); err != nil {
				return err
			}
			if err := checkText(f+".name", li.Name, true); err != nil {
				return err
			}
		default:
			return Invalid(f, "must have price_id, or amount, currency and name")
		}
		if li.Quantity == nil {
			return Invalid(f+".quantity", "is required")
		}
		if *li.Quantity < 1 || *li.Quantity > maxQuantity {
			return Invalid(f+".quantity", "must be between 1 and %d", maxQuantity)
		}
	}
	if err := checkRedirectURL("success_url", in.SuccessURL); err != nil {
		return err
	}
	if err := checkRedirectURL("cancel_url", in.CancelURL); err != nil {
		return err
	}
	if in.CustomerEmail != nil {
		if err := checkEmail("customer_email", *in.CustomerEmail); err != nil {
			return err
		}
	}
	if b := in.BillingAddressCollection; b != nil && *b != "auto" && *b != "required" {
		return Invalid("billing_address_collection", "must be auto or required")
	}
	for i, c := range in.ShippingCountries {
		if len(c) != 2 || strings.Trim(strings.ToUpper(c), "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
			return Invalid(fmt.Sprintf("shipping_countries[%d]", i), "must be a two-letter ISO 3166-1 country code")
		}
	}
	if len(in.ShippingOptions) > maxShippingOpt {
		return Invalid("shipping_options", "can have at most %d items", maxShippingOpt)
	}
	for i, o := range in.ShippingOptions {
		f := fmt.Sprintf("shipping_options[%d]", i)
		if err := checkText(f+".label", o.Label, true); err != nil {
			return err
		}
		if o.Amount == nil {
			return Invalid(f+".amount", "is required")
		}
		if *o.Amount < 0 || *o.Amount > MaxAmount {
			return Invalid(f+".amount", "must be between 0 and %d", MaxAmount)
		}
	}
	return checkMetadata(in.Metadata)
}

// CreateSession creates a hosted checkout session. Codes: validation_error,
// invalid_url, customer_not_found, product_not_found, processor_error.
func (s *Service) CreateSession(ctx context.Context, sc Scope, in SessionInput) (CheckoutSession, error) {
	if err := in.validate(); err != nil {
		return CheckoutSession{}, err
	}
	now := s.clock.Now(ctx, sc)
	cs := CheckoutSession{
		MerchantID: sc.MerchantID, ID: NewID("cs_"), Live: sc.Live, Status: SessionOpen, PaymentStatus: PaymentUnpaid,
		SuccessURL: *in.SuccessURL, CancelURL: *in.CancelURL, CustomerEmail: in.CustomerEmail,
		PassFees: in.PassFeesToCustomer != nil && *in.PassFeesToCustomer, BillingAddressCollection: in.BillingAddressCollection,
		CollectShipping:   in.CollectShippingAddress != nil && *in.CollectShippingAddress,
		ShippingCountries: []string{}, ShippingOptions: []ShippingOption{}, Metadata: mergeMetadata(nil, in.Metadata),
		ExpiresAt: now.Add(s.sessionTTL), Created: now,
	}
	for _, c := range in.ShippingCountries {
		cs.ShippingCountries = append(cs.ShippingCountries, strings.ToUpper(c))
	}
	for _, o := range in.ShippingOptions {
		cs.ShippingOptions = append(cs.ShippingOptions, ShippingOption{Label: *o.Label, Amount: *o.Amount})
	}
	if in.CustomerID != nil {
		cu, err := s.store.Customer(ctx, sc, *in.CustomerID)
		if err != nil {
			return CheckoutSession{}, err
		}
		cs.CustomerID = &cu.ID
		if cs.CustomerEmail == nil {
			cs.CustomerEmail = cu.Email
		}
	}
	for i, li := range in.LineItems {
		item := LineItem{Quantity: *li.Quantity}
		if li.PriceID != nil {
			p, err := s.store.PriceForSale(ctx, sc, *li.PriceID)
			if err != nil {
				return CheckoutSession{}, err
			}
			item.PriceID, item.Name, item.UnitAmount, item.Currency = &p.ID, p.ProductName, p.Amount, p.Currency
		} else {
			cur, _ := checkCurrency("", li.Currency)
			item.Name, item.UnitAmount, item.Currency = *li.Name, *li.Amount, cur
		}
		if i > 0 && item.Currency != cs.Currency {
			return CheckoutSession{}, Invalid(fmt.Sprintf("line_items[%d].currency", i), "must match the other line items (%s)", cs.Currency)
		}
		cs.Currency = item.Currency
		item.Amount = item.UnitAmount * item.Quantity
		cs.AmountSubtotal += item.Amount
		cs.LineItems = append(cs.LineItems, item)
	}
	var plan Plan // the fee matters only when passed on
	if cs.PassFees {
		var err error
		if plan, err = s.store.MerchantPlan(ctx, sc.MerchantID); err != nil {
			return CheckoutSession{}, err
		}
	}
	cs.AmountTotal = cs.TotalWith(plan, 0)
	pcs := processor.CheckoutSession{
		ID: cs.ID, Currency: cs.Currency, AmountTotal: cs.AmountTotal, SuccessURL: cs.SuccessURL, CancelURL: cs.CancelURL,
		ExpiresAt: cs.ExpiresAt,
	}
	if cs.CustomerEmail != nil {
		pcs.CustomerEmail = *cs.CustomerEmail
	}
	for _, li := range cs.LineItems {
		pcs.Lines = append(pcs.Lines, processor.CheckoutLine{Name: li.Name, UnitAmount: li.UnitAmount, Quantity: li.Quantity})
	}
	hosted, err := s.proc.CreateCheckoutSession(ctx, account(sc), pcs)
	if err != nil {
		return CheckoutSession{}, err
	}
	cs.URL = hosted.URL
	if err := s.store.CreateSession(ctx, sc, cs); err != nil {
		return CheckoutSession{}, err
	}
	return cs, nil
}

// Session returns a session of the scope. Codes: session_not_found.
func (s *Service) Session(ctx context.Context, sc Scope, id string) (CheckoutSession, error) {
	return s.store.Session(ctx, sc, id)
}

func account(sc Scope) processor.Account {
	return processor.Account{MerchantID: sc.MerchantID, Live: sc.Live}
}

// SaleablePrice is a price that can be sold now, with its product's name.
type SaleablePrice struct {
	Price
	ProductName string
}

// CheckoutPayment is what the customer submitted on the hosted page,
// besides the card, which only the processor sees.
type CheckoutPayment struct {
	Email    string
	Name     string
	Shipping *ShippingDetails
	Billing  *Address
	// The card's expiry, kept when the card is saved (subscription mode).
	ExpMonth, ExpYear int
}

// ErrSessionClosed is returned for a payment on a session that is no longer
// open; Status tells the page what to say.
type ErrSessionClosed struct{ Status string }

func (e ErrSessionClosed) Error() string { return "checkout session is " + e.Status }

// applyCheckoutCompleted applies checkout.completed in one transaction with
// the session locked: the session completes and its payment succeeds, with
// checkout.session.completed and payment_intent.succeeded. A session that
// is not open (paid in another tab, a double submit, expired) is left
// alone: ErrSessionClosed. A customer is charged once.
func (s *Service) applyCheckoutCompleted(ctx context.Context, a *application) error {
	return s.applyCheckout(ctx, a, true)
}

// applyCheckoutFailed applies checkout.payment_failed: the session's
// payment records the decline with payment_intent.payment_failed and the
// session stays open for another try. ErrSessionClosed as above.
func (s *Service) applyCheckoutFailed(ctx context.Context, a *application) error {
	return s.applyCheckout(ctx, a, false)
}

func (s *Service) applyCheckout(ctx context.Context, a *application, succeeded bool) error {
	p := a.ev.Data
	// A session's mode never changes, so reading it before the lock is exact.
	if cs, err := s.store.SessionByID(ctx, p.SessionID); err == nil && cs.Mode == ModeSubscription {
		return s.applySubscriptionCheckout(ctx, a, succeeded)
	}
	_, err := s.store.PayCheckout(ctx, p.SessionID, func(sc Scope, plan Plan, cs *CheckoutSession, pi *PaymentIntent) (Effects, error) {
		if !a.inScope(sc) {
			return Effects{}, NotFound(SessionNotFound, p.SessionID)
		}
		now := s.clock.Now(ctx, sc)
		if status := cs.StatusAt(now); status != SessionOpen {
			return Effects{}, ErrSessionClosed{Status: status} // an expired one: the sweep will mark it
		}
		var shipping int64
		if p.Shipping != nil {
			shipping = p.Shipping.Option.Amount
		}
		total := cs.TotalWith(plan, shipping)
		if pi.ID == "" {
			*pi = PaymentIntent{
				ID: NewID("pi_"), Live: sc.Live, Currency: cs.Currency, Status: IntentRequiresPaymentMethod,
				CustomerID: cs.CustomerID, Metadata: cs.Metadata, SessionID: &cs.ID, Created: now,
			}
		}
		pi.Amount = total
		if p.Email != "" {
			pi.CustomerEmail = &p.Email
		}
		if p.Name != "" {
			pi.CustomerName = &p.Name
		}
		cs.PaymentIntentID = &pi.ID
		if !succeeded {
			pi.decline(p.DeclineCode, p.CardLast4)
			return a.effects(Effects{Events: []Event{newEvent(EventPaymentFailed, pi.Object(), now)}}, pi.ID, now), nil
		}
		eff := pi.succeed(plan, p.CardLast4, now)
		cs.Status, cs.PaymentStatus, cs.AmountTotal, cs.CompletedAt = SessionComplete, PaymentPaid, total, &now
		cs.Shipping, cs.Billing = p.Shipping, p.Billing
		if cs.CustomerEmail == nil && p.Email != "" {
			cs.CustomerEmail = &p.Email
		}
		eff.Events = []Event{
			newEvent(EventSessionCompleted, cs.Object(), now),
			newEvent(EventPaymentSucceeded, pi.Object(), now),
		}
		return a.effects(eff, pi.ID, now), nil
	})
	return err
}

// SessionForCheckout reads a session by id alone, for the public hosted page
// (the id is its capability). Codes: session_not_found.
func (s *Service) SessionForCheckout(ctx context.Context, id string) (CheckoutSession, error) {
	return s.store.SessionByID(ctx, id)
}

// ExpireSessions closes open sessions past their expiry, at most limit at a
// time, each with checkout.session.expired; it returns how many it closed.
func (s *Service) ExpireSessions(ctx context.Context, limit int) (int, error) {
	return s.store.ExpireSessions(ctx, s.clock.Base(), limit, func(cs *CheckoutSession, now time.Time) (Effects, error) {
		cs.Status = SessionExpired
		return Effects{Events: []Event{newEvent(EventSessionExpired, cs.Object(), now)}}, nil
	})
}
