package payments

import (
	"context"
	"fmt"
	"strings"
	"time"

	"paysvc/internal/processor"
)

// SubscriptionSessionInput is the body of POST /v1/subscription-sessions,
// in one of the spec's two forms. The saved-price form sells a
// subscription product's price (PriceID) and alone takes
// TrialPeriodDays, PassFeesToCustomer and CustomerID; the inline form
// describes its price (AmountCents, Currency, Interval, IntervalCount,
// Name). Both take Quantity, CustomerEmail, the URLs and Metadata, which
// the subscription and every event about it carry.
type SubscriptionSessionInput struct {
	PriceID            *string       `json:"price_id"`
	Quantity           *int64        `json:"quantity"`
	TrialPeriodDays    *int          `json:"trial_period_days"`
	PassFeesToCustomer *bool         `json:"pass_fees_to_customer"`
	CustomerID         *string       `json:"customer_id"`
	AmountCents        *int64        `json:"amount_cents"`
	Currency           *string       `json:"currency"`
	Interval           *string       `json:"interval"`
	IntervalCount      *int          `json:"interval_count"`
	Name               *string       `json:"name"`
	CustomerEmail      *string       `json:"customer_email"`
	SuccessURL         *string       `json:"success_url"`
	CancelURL          *string       `json:"cancel_url"`
	Metadata           MetadataInput `json:"metadata"`
}

// defaultPlanName names an inline price that was given no name.
const defaultPlanName = "Subscription"

// validate checks what needs no lookup; it returns the inline form's
// interval (zero for the saved-price form). Codes: validation_error,
// invalid_interval, invalid_url.
func (in *SubscriptionSessionInput) validate() (Interval, error) {
	inline := in.AmountCents != nil || in.Currency != nil || in.Interval != nil || in.IntervalCount != nil || in.Name != nil
	var iv Interval
	switch {
	case in.PriceID != nil && inline:
		return iv, Errorf(ValidationError, "The body mixes the saved-price and inline forms: use price_id (a subscription product's price), or amount_cents, currency, interval, interval_count and name.")
	case in.PriceID != nil:
		if !strings.HasPrefix(*in.PriceID, "price_") {
			return iv, Invalid("price_id", "must be a price id (price_…)")
		}
		if in.TrialPeriodDays != nil && (*in.TrialPeriodDays < 0 || *in.TrialPeriodDays > MaxTrialPeriodDays) {
			return iv, Invalid("trial_period_days", "must be between 0 and %d", MaxTrialPeriodDays)
		}
		if in.CustomerID != nil && !strings.HasPrefix(*in.CustomerID, "cus_") {
			return iv, Invalid("customer_id", "must be a customer id (cus_…)")
		}
	case inline:
		for field, given := range map[string]bool{"trial_period_days": in.TrialPeriodDays != nil,
			"pass_fees_to_customer": in.PassFeesToCustomer != nil, "customer_id": in.CustomerID != nil} {
			if given {
				return iv, Errorf(ValidationError, "%s applies only to the saved-price form (price_id): the body mixes the saved-price and inline forms.", field)
			}
		}
		if err := checkAmount("amount_cents", in.AmountCents); err != nil {
			return iv, err
		}
		if _, err := checkCurrency("currency", in.Currency); err != nil {
			return iv, err
		}
		if in.Interval == nil {
			return iv, Invalid("interval", "is required")
		}
		var err error
		if iv, err = UnitInterval(*in.Interval, in.IntervalCount); err != nil {
			return iv, err
		}
		if err := checkText("name", in.Name, false); err != nil {
			return iv, err
		}
		if in.Name != nil && strings.TrimSpace(*in.Name) == "" {
			return iv, Invalid("name", "must not be blank")
		}
	default:
		return iv, Errorf(ValidationError, "Give price_id (a subscription product's price), or amount_cents, currency and interval.")
	}
	if in.Quantity != nil && (*in.Quantity < 1 || *in.Quantity > maxQuantity) {
		return iv, Invalid("quantity", "must be between 1 and %d", maxQuantity)
	}
	if in.CustomerEmail != nil {
		if err := checkEmail("customer_email", *in.CustomerEmail); err != nil {
			return iv, err
		}
	}
	if err := checkRedirectURL("success_url", in.SuccessURL); err != nil {
		return iv, err
	}
	if err := checkRedirectURL("cancel_url", in.CancelURL); err != nil {
		return iv, err
	}
	return iv, checkMetadata(in.Metadata)
}

// CreateSubscriptionSession creates a hosted checkout session in
// subscription mode: a checkout session like a payment session (cs_ id,
// GET /v1/payment-sessions/{id}, expiry, idempotency) whose one line is a
// recurring price. Paying it creates the subscription. A trial (the
// session's trial_period_days, else the product's) means nothing is due at
// checkout: amount_total 0. customer_id wins over customer_email.
// Codes: validation_error, invalid_interval, invalid_url,
// product_not_found (unknown or archived price), customer_not_found,
// prohibited_content (the inline name), processor_error.
func (s *Service) CreateSubscriptionSession(ctx context.Context, sc Scope, in SubscriptionSessionInput) (CheckoutSession, error) {
	iv, err := in.validate()
	if err != nil {
		return CheckoutSession{}, err
	}
	if err := s.CheckProcessorInterval(iv); err != nil {
		return CheckoutSession{}, err // Stripe bills at most every 3 years
	}
	if _, ok := s.billing(); ok && in.PassFeesToCustomer != nil && *in.PassFeesToCustomer {
		// The processor bills the mirrored price as it is, every period.
		return CheckoutSession{}, Invalid("pass_fees_to_customer", "is not available when the payment processor bills subscriptions (PROCESSOR=stripe)")
	}
	now := s.clock.Now(ctx, sc)
	qty := int64(1)
	if in.Quantity != nil {
		qty = *in.Quantity
	}
	li := LineItem{Quantity: qty}
	trial := 0
	if in.PriceID != nil {
		p, err := s.store.RecurringPriceForSale(ctx, sc, *in.PriceID)
		if err != nil {
			return CheckoutSession{}, err
		}
		li.PriceID, li.Name, li.UnitAmount, li.Currency = &p.Price.ID, p.Name, p.Price.Amount, p.Price.Currency
		iv = p.Price.Interval
		li.Recurring = &LineRecurring{Interval: p.Price.Interval.Name, IntervalCount: p.Price.Interval.Count, Product: &p.ID}
		trial = p.TrialPeriodDays
		if in.TrialPeriodDays != nil {
			trial = *in.TrialPeriodDays
		}
	} else {
		name := defaultPlanName
		if in.Name != nil {
			name = *in.Name
			if err := s.screen(ctx, sc, map[string]*string{"name": in.Name}); err != nil {
				return CheckoutSession{}, err
			}
		}
		cur, _ := checkCurrency("", in.Currency)
		li.Name, li.UnitAmount, li.Currency = name, *in.AmountCents, cur
		li.Recurring = &LineRecurring{Interval: iv.Name, IntervalCount: iv.Count}
	}
	li.Amount = li.UnitAmount * li.Quantity
	cs := CheckoutSession{
		MerchantID: sc.MerchantID, ID: NewID("cs_"), Live: sc.Live, Mode: ModeSubscription, Status: SessionOpen,
		PaymentStatus: PaymentUnpaid, SuccessURL: *in.SuccessURL, CancelURL: *in.CancelURL, CustomerEmail: in.CustomerEmail,
		PassFees: in.PassFeesToCustomer != nil && *in.PassFeesToCustomer, Currency: li.Currency, LineItems: []LineItem{li},
		ShippingCountries: []string{}, ShippingOptions: []ShippingOption{}, Metadata: mergeMetadata(nil, in.Metadata),
		ExpiresAt: now.Add(s.sessionTTL), Created: now,
	}
	if trial > 0 {
		cs.TrialPeriodDays = &trial
	} else {
		cs.AmountSubtotal = li.Amount // the first period is due at checkout
	}
	if in.CustomerID != nil {
		cu, err := s.store.Customer(ctx, sc, *in.CustomerID)
		if err != nil {
			return CheckoutSession{}, err
		}
		cs.CustomerID = &cu.ID
		cs.CustomerEmail = cu.Email // the customer's, not customer_email
		if cs.CustomerEmail == nil {
			cs.CustomerEmail = in.CustomerEmail
		}
	}
	var plan Plan
	if cs.PassFees {
		if plan, err = s.store.MerchantPlan(ctx, sc.MerchantID); err != nil {
			return CheckoutSession{}, err
		}
	}
	cs.AmountTotal = cs.TotalWith(plan, 0)
	var hosted processor.HostedCheckout
	if b, ok := s.billing(); ok {
		// The processor bills the subscription: its checkout, on its
		// mirror of the price, keyed by the session's id.
		hosted, err = s.processorSubscriptionCheckout(ctx, sc, b, cs, iv)
	} else {
		hosted, err = s.proc.CreateCheckoutSession(ctx, account(sc), processor.CheckoutSession{
			ID: cs.ID, Currency: cs.Currency, AmountTotal: cs.AmountTotal, SuccessURL: cs.SuccessURL, CancelURL: cs.CancelURL,
			Subscription: true,
		})
	}
	if err != nil {
		return CheckoutSession{}, err
	}
	cs.URL = hosted.URL
	if err := s.store.CreateSession(ctx, sc, cs); err != nil {
		return CheckoutSession{}, err
	}
	return cs, nil
}

// SubscriptionCheckout is what paying a subscription session creates, for
// the store to insert in the session's transaction: the customer (when the
// session named none), the saved card, the subscription with its items and,
// without a trial, the first period's charge and its payment.
type SubscriptionCheckout struct {
	NewCustomer  *Customer
	Card         *SavedCard
	Subscription *Subscription
	Charge       *SubscriptionCharge
	Payment      *PaymentIntent
}

// applySubscriptionCheckout applies checkout.completed or
// checkout.payment_failed to a subscription session, with the session
// locked. A decline creates nothing (the session stays open for another
// card; the processor event alone is recorded). A success creates, in one
// transaction: the customer if the session had none, the saved card, the
// subscription (trialing until the trial's end, which anchors its cycle;
// else active with its first period paid by a payment like any other, with
// its fee and ledger entry), and completes the session, with
// checkout.session.completed, customer.subscription.created and, when a
// payment was taken, payment_intent.succeeded.
func (s *Service) applySubscriptionCheckout(ctx context.Context, a *application, succeeded bool) error {
	p := a.ev.Data
	return s.store.PaySubscriptionCheckout(ctx, p.SessionID, func(sc Scope, plan Plan, cs *CheckoutSession) (SubscriptionCheckout, Effects, error) {
		var out SubscriptionCheckout
		if !a.inScope(sc) {
			return out, Effects{}, NotFound(SessionNotFound, p.SessionID)
		}
		now := s.clock.Now(ctx, sc)
		if status := cs.StatusAt(now); status != SessionOpen {
			return out, Effects{}, ErrSessionClosed{Status: status}
		}
		if !succeeded {
			return out, a.effects(Effects{}, "", now), nil
		}
		// A processor that bills the subscription keeps its card (Card
		// nil) and names its subscription.
		owned := p.Subscription != nil && p.Subscription.ID != ""
		if (p.Card == nil && !owned) || len(cs.LineItems) != 1 || cs.LineItems[0].Recurring == nil {
			return out, Effects{}, fmt.Errorf("subscription checkout %s: no saved card or recurring line", cs.ID)
		}
		li := cs.LineItems[0]
		iv, err := NewInterval(li.Recurring.Interval, li.Recurring.IntervalCount)
		if err != nil {
			return out, Effects{}, err
		}
		customerID := cs.CustomerID
		if customerID == nil {
			cu := Customer{ID: NewID("cus_"), Metadata: map[string]string{}, Live: sc.Live, Created: now}
			setOptional(&cu.Email, nonEmpty(p.Email))
			setOptional(&cu.Name, nonEmpty(p.Name))
			out.NewCustomer, customerID = &cu, &cu.ID
		}
		var cardID *string
		last4 := p.CardLast4
		if p.Card != nil {
			card := *p.Card
			card.CustomerID = *customerID
			out.Card, cardID, last4 = &card, &card.ID, card.Last4
		}

		price := RecurringPrice{Amount: li.UnitAmount, Currency: li.Currency, Interval: iv}
		if li.PriceID != nil {
			price.ID = *li.PriceID
		} else {
			price.ID = NewID("price_") // an inline price lives on its item only
		}
		if li.Recurring.Product != nil {
			price.ProductID = *li.Recurring.Product
		}
		// Whole seconds: the API's times are Unix seconds, and a period
		// computed from a fractional anchor would not round-trip.
		start := now.UTC().Truncate(time.Second)
		sub := Subscription{
			ID: NewID("sub_"), CustomerID: *customerID, Status: SubActive, Anchor: start,
			Items:    []SubscriptionItem{{ID: NewID("si_"), Name: li.Name, Price: price, Quantity: int(li.Quantity)}},
			Metadata: nonNilMap(cs.Metadata), Live: sc.Live, Created: now, Currency: li.Currency, PassFees: cs.PassFees,
			CardID: cardID, SessionID: &cs.ID, CurrentPeriodStart: start,
		}
		if owned {
			sub.ProcessorID = p.Subscription.ID
		}
		if cs.TrialPeriodDays != nil && *cs.TrialPeriodDays > 0 {
			end := start.Add(time.Duration(*cs.TrialPeriodDays) * 24 * time.Hour)
			sub.Status, sub.TrialEnd, sub.Anchor, sub.CurrentPeriodEnd = SubTrialing, &end, end, end
		} else {
			sub.CurrentPeriodEnd = PeriodEnd(start, iv, 1)
		}
		out.Subscription = &sub

		cs.Status, cs.CompletedAt, cs.SubscriptionID, cs.CustomerID = SessionComplete, &now, &sub.ID, customerID
		if cs.CustomerEmail == nil && p.Email != "" {
			cs.CustomerEmail = &p.Email
		}
		var eff Effects
		paymentID := ""
		if sub.Status == SubTrialing {
			cs.PaymentStatus, cs.AmountTotal = PaymentNoPaymentRequired, 0
		} else {
			desc := "Subscription creation"
			pi := PaymentIntent{
				ID: NewID("pi_"), Live: sc.Live, Amount: cs.TotalWith(plan, 0), Currency: cs.Currency, Status: IntentRequiresPaymentMethod,
				CustomerID: customerID, CustomerEmail: cs.CustomerEmail, Description: &desc, Metadata: cs.Metadata,
				SessionID: &cs.ID, SubscriptionID: &sub.ID, Created: now,
			}
			setOptional(&pi.CustomerName, nonEmpty(p.Name))
			eff = pi.succeed(plan, last4, now)
			periodEnd := sub.CurrentPeriodEnd
			out.Payment = &pi
			out.Charge = &SubscriptionCharge{
				ID: NewID("subch_"), SubscriptionID: sub.ID, Kind: ChargeFirst, PeriodStart: &start, PeriodEnd: &periodEnd,
				Amount: pi.Amount, Currency: pi.Currency, Status: ChargeSucceeded, Attempts: 1, PaymentIntentID: &pi.ID, Created: now,
			}
			cs.PaymentStatus, cs.AmountTotal, cs.PaymentIntentID = PaymentPaid, pi.Amount, &pi.ID
			paymentID = pi.ID
		}
		eff.Events = []Event{
			newEvent(EventSessionCompleted, cs.Object(), now),
			newEvent(EventSubscriptionCreated, sub.Object(), now),
		}
		if out.Payment != nil {
			eff.Events = append(eff.Events, newEvent(EventPaymentSucceeded, out.Payment.Object(), now))
		}
		return out, a.effects(eff, paymentID, now), nil
	})
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
