// Package stripe is the card processor on a Stripe platform account
// (PROCESSOR=stripe): every merchant is a Stripe connected account, every
// call carries it as Stripe-Account, and the platform takes its fee as
// application_fee_amount. It speaks the processor package's terms; no
// stripe-go type leaves it. Outcomes (a checkout paid, a card declined, a
// refund settled, a dispute) come back as Stripe webhooks (inbound.go).
//
// Subscriptions are Stripe Billing's (subscriptions.go, processor.Billing):
// the service routes their checkout, cancel, resume, quantity and portal
// there, and Stripe bills renewals, prorations and dunning itself.
package stripe

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	stripego "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"

	"paysvc/internal/payments"
	"paysvc/internal/processor"
)

// Keys are a Stripe platform's keys for one mode.
type Keys struct {
	Secret      string // sk_… or rk_…
	Publishable string // pk_…, given to browsers of embedded payments
}

// Config is the adapter's configuration (README, "Running on Stripe").
type Config struct {
	Test, Live Keys // a mode without a secret key refuses its calls
	// APIBase replaces https://api.stripe.com (STRIPE_API_BASE): stripe-mock,
	// a recording proxy.
	APIBase string
	// Timeout bounds each call (STRIPE_TIMEOUT); 0 means 20s.
	Timeout time.Duration
}

// Processor implements processor.Processor on Stripe.
type Processor struct {
	db         *sqlx.DB
	test, live *client.API
	keys       Config
}

var _ processor.Processor = (*Processor)(nil)

// New returns the adapter. db holds the connected accounts and the id map
// (stripe_accounts, stripe_objects).
func New(db *sqlx.DB, c Config) *Processor {
	if c.Timeout == 0 {
		c.Timeout = 20 * time.Second
	}
	p := &Processor{db: db, keys: c}
	if c.Test.Secret != "" {
		p.test = newClient(c.Test.Secret, c)
	}
	if c.Live.Secret != "" {
		p.live = newClient(c.Live.Secret, c)
	}
	return p
}

// newClient is a client of its own (client.New, never the package-level
// key), with the timeout, no retries of its own (the worker retries with
// backoff, and an inline call answers 502 rather than wait) and stripe-go's
// logging off: its messages can hold Stripe's error text.
func newClient(key string, c Config) *client.API {
	cfg := &stripego.BackendConfig{
		HTTPClient:        &http.Client{Timeout: c.Timeout},
		MaxNetworkRetries: stripego.Int64(0),
		LeveledLogger:     &stripego.LeveledLogger{Level: stripego.LevelNull},
		EnableTelemetry:   stripego.Bool(false),
	}
	if c.APIBase != "" {
		cfg.URL = stripego.String(strings.TrimRight(c.APIBase, "/"))
	}
	backend := stripego.GetBackendWithConfig(stripego.APIBackend, cfg)
	return client.New(key, &stripego.Backends{API: backend, Connect: backend, Uploads: backend})
}

// call is one Stripe call for a merchant: its mode's client, its connected
// account and plan, and params carrying them.
type call struct {
	api     *client.API
	account string // acct_…
	plan    payments.Plan
	keys    Keys
}

// params sets what every call carries: ctx, the connected account and, for
// a mutating call, the idempotency key (our row id, so a retry after a
// crash gets Stripe's first answer and moves no money twice).
func (c call) params(ctx context.Context, p *stripego.Params, idempotencyKey string) {
	p.Context = ctx
	p.SetStripeAccount(c.account)
	if idempotencyKey != "" {
		p.SetIdempotencyKey(idempotencyKey)
	}
}

// begin finds the client of acct's mode, the merchant's connected account
// and its plan (for the platform fee), in one query.
func (p *Processor) begin(ctx context.Context, op string, acct processor.Account) (call, error) {
	api, keys := p.test, p.keys.Test
	if acct.Live {
		api, keys = p.live, p.keys.Live
	}
	if api == nil {
		return call{}, &processor.Error{Op: op, Code: "no_key_for_mode",
			Err: fmt.Errorf("no Stripe key configured for livemode=%v", acct.Live)}
	}
	const q = `SELECT a.account_id, m.plan FROM stripe_accounts a JOIN merchants m ON m.id = a.merchant_id
	WHERE a.merchant_id = $1 AND a.livemode = $2`
	var row struct {
		Account string `db:"account_id"`
		Plan    string `db:"plan"`
	}
	if err := p.db.GetContext(ctx, &row, q, acct.MerchantID, acct.Live); err != nil {
		if _, err := p.connectedAccount(ctx, op, acct); err != nil {
			return call{}, err // no_connected_account, or the database is down
		}
		return call{}, &processor.Error{Op: op, Retryable: true, Code: "database_unavailable", Err: err}
	}
	return call{api: api, account: row.Account, plan: payments.Plan(row.Plan), keys: keys}, nil
}

// Metadata keys under which our ids ride on Stripe objects: Stripe's events
// carry them back.
const (
	metaSession = "paysvc_checkout_session"
	metaPayment = "paysvc_payment_intent"
	metaRefund  = "paysvc_refund"
)

// Stripe Checkout's limits on expires_at: 30 minutes to 24 hours away.
const (
	minCheckoutTTL = 30*time.Minute + time.Minute // a margin for the clocks
	maxCheckoutTTL = 24 * time.Hour
)

// CreateCheckoutSession creates a Stripe Checkout session in payment mode
// on the merchant's account: its URL is the session's url. Our session id
// is the idempotency key and client_reference_id, and rides in the
// payment's metadata; {CHECKOUT_SESSION_ID} in the redirect URLs becomes
// our id (Stripe would put its own there).
func (p *Processor) CreateCheckoutSession(ctx context.Context, acct processor.Account, cs processor.CheckoutSession) (processor.HostedCheckout, error) {
	const op = "checkout_session"
	if cs.Subscription {
		// The service sends a subscription's checkout through
		// CreateSubscriptionCheckout (processor.Billing), on a mirrored
		// price: a one-off line cannot start a Stripe subscription.
		return processor.HostedCheckout{}, &processor.Error{Op: op, Code: "use_billing",
			Err: errors.New("a subscription's checkout goes through CreateSubscriptionCheckout with PROCESSOR=stripe")}
	}
	c, err := p.begin(ctx, op, acct)
	if err != nil {
		return processor.HostedCheckout{}, err
	}
	ours := strings.NewReplacer("{CHECKOUT_SESSION_ID}", cs.ID)
	params := &stripego.CheckoutSessionParams{
		Mode:              stripego.String(string(stripego.CheckoutSessionModePayment)),
		SuccessURL:        stripego.String(ours.Replace(cs.SuccessURL)),
		CancelURL:         stripego.String(ours.Replace(cs.CancelURL)),
		ClientReferenceID: stripego.String(cs.ID),
		Metadata:          map[string]string{metaSession: cs.ID},
		PaymentIntentData: &stripego.CheckoutSessionPaymentIntentDataParams{
			ApplicationFeeAmount: stripego.Int64(payments.Fee(c.plan, cs.Currency, cs.AmountTotal)),
			Metadata:             map[string]string{metaSession: cs.ID},
		},
	}
	if cs.CustomerEmail != "" {
		params.CustomerEmail = stripego.String(cs.CustomerEmail)
	}
	if ttl := time.Until(cs.ExpiresAt); ttl >= minCheckoutTTL && ttl <= maxCheckoutTTL {
		params.ExpiresAt = stripego.Int64(cs.ExpiresAt.Unix())
	}
	var sum int64
	for _, l := range cs.Lines {
		params.LineItems = append(params.LineItems, lineItem(cs.Currency, l.Name, l.UnitAmount, l.Quantity))
		sum += l.UnitAmount * l.Quantity
	}
	if extra := cs.AmountTotal - sum; extra > 0 || len(params.LineItems) == 0 {
		// What the lines do not hold: fees passed on to the customer, or
		// a session created without lines.
		params.LineItems = append(params.LineItems, lineItem(cs.Currency, "Processing fee", extra, 1))
	}
	c.params(ctx, &params.Params, cs.ID)
	s, err := c.api.CheckoutSessions.New(params)
	if err != nil {
		return processor.HostedCheckout{}, asError(op, err)
	}
	return processor.HostedCheckout{URL: s.URL}, nil
}

func lineItem(currency, name string, unit, qty int64) *stripego.CheckoutSessionLineItemParams {
	return &stripego.CheckoutSessionLineItemParams{
		Quantity: stripego.Int64(qty),
		PriceData: &stripego.CheckoutSessionLineItemPriceDataParams{
			Currency:    stripego.String(currency),
			UnitAmount:  stripego.Int64(unit),
			ProductData: &stripego.CheckoutSessionLineItemPriceDataProductDataParams{Name: stripego.String(name)},
		},
	}
}

// CreatePaymentIntent creates a Stripe PaymentIntent on the merchant's
// account, with the platform fee, our id as idempotency key and in its
// metadata. The browser confirms it with Stripe.js: the platform's
// publishable key, the connected account (stripeAccount) and the client
// secret.
func (p *Processor) CreatePaymentIntent(ctx context.Context, acct processor.Account, pi processor.PaymentIntent) (processor.ClientValues, error) {
	const op = "payment_intent"
	c, err := p.begin(ctx, op, acct)
	if err != nil {
		return processor.ClientValues{}, err
	}
	params := &stripego.PaymentIntentParams{
		Amount:                  stripego.Int64(pi.Amount),
		Currency:                stripego.String(pi.Currency),
		ApplicationFeeAmount:    stripego.Int64(payments.Fee(c.plan, pi.Currency, pi.Amount)),
		AutomaticPaymentMethods: &stripego.PaymentIntentAutomaticPaymentMethodsParams{Enabled: stripego.Bool(true)},
		Metadata:                map[string]string{metaPayment: pi.ID},
	}
	c.params(ctx, &params.Params, pi.ID)
	out, err := c.api.PaymentIntents.New(params)
	if err != nil {
		return processor.ClientValues{}, asError(op, err)
	}
	if err := p.remember(ctx, acct, pi.ID, out.ID); err != nil {
		return processor.ClientValues{}, &processor.Error{Op: op, Retryable: true, Code: "database_unavailable", Err: err}
	}
	return processor.ClientValues{ClientSecret: out.ClientSecret, PublishableKey: c.keys.Publishable, AccountID: c.account}, nil
}

// Refund refunds a payment on Stripe; our refund id is the idempotency key,
// so a retry gets the first refund back. Stripe may answer pending (bank
// transfers, some cards): the refund then stays pending here until
// charge.refund.updated settles it.
func (p *Processor) Refund(ctx context.Context, acct processor.Account, r processor.RefundRequest) (processor.RefundResult, error) {
	const op = "refund"
	c, err := p.begin(ctx, op, acct)
	if err != nil {
		return processor.RefundResult{}, err
	}
	paymentID, err := p.stripeID(ctx, acct, r.PaymentIntentID, r.SessionID)
	if err != nil {
		return processor.RefundResult{}, &processor.Error{Op: op, Retryable: true, Code: "database_unavailable", Err: err}
	}
	if paymentID == "" {
		return processor.RefundResult{}, &processor.Error{Op: op, Code: "unknown_payment",
			Err: fmt.Errorf("no Stripe payment recorded for %s", r.PaymentIntentID)}
	}
	params := &stripego.RefundParams{
		PaymentIntent: stripego.String(paymentID),
		Amount:        stripego.Int64(r.Amount),
		Metadata:      map[string]string{metaRefund: r.ID, metaPayment: r.PaymentIntentID},
	}
	c.params(ctx, &params.Params, r.ID)
	out, err := c.api.Refunds.New(params)
	if err != nil {
		return processor.RefundResult{}, asError(op, err)
	}
	return refundResult(out.Status, string(out.FailureReason)), nil
}

// refundResult reads a Stripe refund's status.
func refundResult(status stripego.RefundStatus, failure string) processor.RefundResult {
	switch status {
	case stripego.RefundStatusSucceeded:
		return processor.RefundResult{Succeeded: true}
	case stripego.RefundStatusFailed, stripego.RefundStatusCanceled:
		if failure == "" {
			failure = string(status)
		}
		return processor.RefundResult{FailureReason: failure}
	}
	return processor.RefundResult{Pending: true} // pending, requires_action
}

// SubmitDisputeEvidence submits a dispute's evidence to Stripe. Stripe
// decides weeks later: the answer is under_review, and
// charge.dispute.closed brings the decision.
func (p *Processor) SubmitDisputeEvidence(ctx context.Context, acct processor.Account, e processor.DisputeEvidence) (processor.DisputeDecision, error) {
	const op = "dispute_evidence"
	c, err := p.begin(ctx, op, acct)
	if err != nil {
		return processor.DisputeDecision{}, err
	}
	disputeID, err := p.stripeID(ctx, acct, disputeKey(e.PaymentIntentID), disputeKey(e.SessionID))
	if err != nil {
		return processor.DisputeDecision{}, &processor.Error{Op: op, Retryable: true, Code: "database_unavailable", Err: err}
	}
	if disputeID == "" {
		return processor.DisputeDecision{}, &processor.Error{Op: op, Code: "unknown_dispute", Err: fmt.Errorf("no Stripe dispute recorded for %s", e.ID)}
	}
	params := &stripego.DisputeParams{Submit: stripego.Bool(true), Metadata: map[string]string{"paysvc_dispute": e.ID}}
	for k, v := range e.Evidence {
		// The service accepts Stripe's evidence fields only
		// (payments.evidenceFields), so they pass through by name.
		params.AddExtra("evidence["+k+"]", v)
	}
	c.params(ctx, &params.Params, e.ID) // evidence is sent once (payments.SendEvidence)
	if _, err := c.api.Disputes.Update(disputeID, params); err != nil {
		return processor.DisputeDecision{}, asError(op, err)
	}
	return processor.DisputeDecision{Status: "under_review"}, nil
}

// Account reads the merchant's connected account from Stripe: readiness,
// country, currency and its default payout bank, which Stripe already
// masks to the bank's name and last4.
func (p *Processor) Account(ctx context.Context, acct processor.Account) (processor.ConnectedAccount, error) {
	const op = "account"
	c, err := p.begin(ctx, op, acct)
	if err != nil {
		return processor.ConnectedAccount{}, err
	}
	params := &stripego.AccountParams{}
	params.Context = ctx // the platform reads the account: no Stripe-Account
	a, err := c.api.Accounts.GetByID(c.account, params)
	if err != nil {
		return processor.ConnectedAccount{}, asError(op, err)
	}
	out := processor.ConnectedAccount{
		ID: a.ID, ChargesEnabled: a.ChargesEnabled, PayoutsEnabled: a.PayoutsEnabled,
		Country: strings.ToUpper(a.Country), DefaultCurrency: strings.ToLower(string(a.DefaultCurrency)),
	}
	if a.ExternalAccounts != nil {
		for _, ea := range a.ExternalAccounts.Data {
			b := ea.BankAccount
			if b == nil || (out.BankLast4 != "" && !b.DefaultForCurrency) {
				continue
			}
			out.BankName, out.BankLast4 = b.BankName, b.Last4
		}
	}
	return out, nil
}

// ChargeCard is not used with PROCESSOR=stripe: Stripe Billing charges a
// subscription's renewals, prorations and retries itself, and the
// renewal sweep skips the subscriptions it bills. A call is refused,
// permanently.
func (p *Processor) ChargeCard(ctx context.Context, acct processor.Account, c processor.CardCharge) (processor.Outcome, error) {
	return processor.Outcome{}, &processor.Error{Op: "charge_card", Code: "billed_by_stripe",
		Err: errors.New("charges of saved cards are made by Stripe Billing itself")}
}

// SupportsInterval reports whether Stripe can bill every count units:
// Stripe allows at most 3 years (36 months, 156 weeks, 1095 days).
func (p *Processor) SupportsInterval(months, days int) bool {
	return months <= 36 && days <= 3*365
}

// remember records Stripe's id of one of our objects.
func (p *Processor) remember(ctx context.Context, acct processor.Account, ours, theirs string) error {
	const q = `INSERT INTO stripe_objects (merchant_id, livemode, id, stripe_id) VALUES ($1, $2, $3, $4)
	ON CONFLICT (merchant_id, livemode, id) DO UPDATE SET stripe_id = EXCLUDED.stripe_id`
	_, err := p.db.ExecContext(ctx, q, acct.MerchantID, acct.Live, ours, theirs)
	return err
}

// disputeKey names, in stripe_objects, Stripe's dispute of one of our
// payments (by its pi_ id, or its cs_ id for a Checkout payment): a payment
// has at most one dispute, and our dp_ id is made only when the dispute is
// applied, after Stripe's event told us its id.
func disputeKey(ours string) string {
	if ours == "" {
		return ""
	}
	return "dispute:" + ours
}

// stripeID is Stripe's id of the first of ours it knows; "" for none.
func (p *Processor) stripeID(ctx context.Context, acct processor.Account, ours ...string) (string, error) {
	const q = `SELECT stripe_id FROM stripe_objects WHERE merchant_id = $1 AND livemode = $2 AND id = $3`
	for _, id := range ours {
		if id == "" {
			continue
		}
		var s string
		err := p.db.GetContext(ctx, &s, q, acct.MerchantID, acct.Live, id)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return "", err
		}
	}
	return "", nil
}
