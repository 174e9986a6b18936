// Package sandbox is the built-in card processor: an emulator of a
// processor's test mode, stateful in PostgreSQL, so that the whole product
// works on one machine with no outside network (decisions.md §5).
package sandbox

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"paysvc/internal/payments"
	"paysvc/internal/processor"
)

// Test cards of decisions.md §5.
const (
	CardSuccess           = "4242424242424242"
	CardDeclined          = "4000000000000002"
	CardInsufficientFunds = "4000000000009995"
	CardDispute           = "4000000000000259"
	// CardDeclinesAfterSave is saved (a subscription with a trial starts
	// with it) but every charge on it is declined card_declined.
	CardDeclinesAfterSave = "4000000000000341"
)

// Sandbox implements processor.Processor.
type Sandbox struct {
	db       *sqlx.DB
	baseURL  string
	accounts sync.Map // processor.Account → client; they never change once committed
	latency  time.Duration
	// inRequest runs a statement in the request's transaction when ctx
	// is an idempotent request's (WithRequests), else on db.
	inRequest func(ctx context.Context, fn func(q sqlx.ExtContext) error) (bool, error)
}

var _ processor.Processor = (*Sandbox)(nil)

// New returns the sandbox; hosted pages are served under baseURL.
func New(db *sqlx.DB, baseURL string) *Sandbox {
	s := &Sandbox{db: db, baseURL: strings.TrimRight(baseURL, "/")}
	s.inRequest = func(_ context.Context, fn func(q sqlx.ExtContext) error) (bool, error) { return false, fn(s.db) }
	return s
}

// WithRequests makes the sandbox's statements made during an idempotent
// request run in the request's transaction (postgres.Store.InRequest), so
// that the request never waits for a second connection while it holds one.
func (s *Sandbox) WithRequests(inRequest func(ctx context.Context, fn func(q sqlx.ExtContext) error) (bool, error)) *Sandbox {
	s.inRequest = inRequest
	return s
}

// WithLatency makes refunds and saved-card charges answer d after they
// are executed (SANDBOX_REFUND_LATENCY), to emulate a slow processor.
func (s *Sandbox) WithLatency(d time.Duration) *Sandbox {
	s.latency = d
	return s
}

// CreateCheckoutSession hosts the session at {PUBLIC_BASE_URL}/checkout/{id}.
func (s *Sandbox) CreateCheckoutSession(_ context.Context, _ processor.Account, cs processor.CheckoutSession) (processor.HostedCheckout, error) {
	return processor.HostedCheckout{URL: s.baseURL + "/checkout/" + cs.ID}, nil
}

// CreatePaymentIntent returns the browser's values for an embedded payment:
// a fresh client secret and the merchant's sandbox account and publishable key.
func (s *Sandbox) CreatePaymentIntent(ctx context.Context, acct processor.Account, pi processor.PaymentIntent) (processor.ClientValues, error) {
	a, err := s.client(ctx, acct)
	if err != nil {
		return processor.ClientValues{}, err
	}
	return processor.ClientValues{
		ClientSecret:   payments.NewID(pi.ID + "_secret_"),
		PublishableKey: a.PublishableKey,
		AccountID:      a.AccountID,
	}, nil
}

// client is what the browser knows of a merchant's sandbox account in one
// mode.
type client struct {
	AccountID      string `db:"account_id"`
	PublishableKey string `db:"publishable_key"`
}

// client returns (creating on first use) the merchant's sandbox account.
// Its ids never change once committed, so each is read once per process:
// an upsert on every payment would serialize a merchant's payments on one
// row lock. Within an idempotent request the upsert runs in the request's
// transaction, and a row it creates there is not remembered: were the
// request rolled back, another call would create the account anew, with
// other ids.
func (s *Sandbox) client(ctx context.Context, acct processor.Account) (client, error) {
	if a, ok := s.accounts.Load(acct); ok {
		return a.(client), nil
	}
	prefix := "pk_test_"
	if acct.Live {
		prefix = "pk_live_"
	}
	// DO UPDATE (a no-op) rather than DO NOTHING so RETURNING always yields
	// the row, new or existing, in one round trip. A row made before this
	// transaction began is committed (now() is the transaction's start);
	// one made in it, by this statement or an earlier one, is not yet.
	const q = `INSERT INTO sandbox_accounts (merchant_id, livemode, account_id, publishable_key) VALUES ($1, $2, $3, $4)
	ON CONFLICT (merchant_id, livemode) DO UPDATE SET merchant_id = EXCLUDED.merchant_id
	RETURNING account_id, publishable_key, created_at < now()`
	var a client
	var committed bool
	inRequest, err := s.inRequest(ctx, func(db sqlx.ExtContext) error {
		return db.QueryRowxContext(ctx, q, acct.MerchantID, acct.Live, payments.NewID("acct_"), payments.NewID(prefix)).
			Scan(&a.AccountID, &a.PublishableKey, &committed)
	})
	if err != nil {
		return client{}, &processor.Error{Op: "account", Retryable: true, Code: "sandbox_unavailable", Err: err}
	}
	if committed || !inRequest {
		s.accounts.Store(acct, a)
	}
	return a, nil
}

// Charge decides a test card's outcome.
func Charge(cardNumber string) processor.Outcome {
	n := strings.NewReplacer(" ", "", "-", "").Replace(cardNumber)
	o := processor.Outcome{}
	if len(n) >= 4 {
		o.Last4 = n[len(n)-4:]
	}
	switch n {
	case CardSuccess:
		o.Succeeded = true
	case CardDispute:
		o.Succeeded = true // and a dispute follows: see Cards
	case CardInsufficientFunds:
		o.DeclineCode = "insufficient_funds"
	case CardDeclinesAfterSave, CardDeclined:
		o.DeclineCode = "card_declined"
	default:
		o.DeclineCode = "invalid_number"
	}
	return o
}

// ErrBadCredentials is a confirm call whose publishable key or client secret
// does not belong to the payment.
var ErrBadCredentials = processor.ErrBadClientCredentials

// CheckConfirm verifies that the publishable key is the account's of the
// payment's merchant and mode and that the client secret hashes to the
// stored one (compared in constant time).
func (s *Sandbox) CheckConfirm(ctx context.Context, sc payments.Scope, pi payments.PaymentIntent, publishableKey, clientSecret string) error {
	if pi.ClientSecretHash == nil {
		return ErrBadCredentials // a checkout payment: confirmed on the hosted page only
	}
	a, err := s.client(ctx, processor.Account{MerchantID: sc.MerchantID, Live: sc.Live})
	if err != nil {
		return fmt.Errorf("load account: %w", err)
	}
	keyOK := subtle.ConstantTimeCompare([]byte(a.PublishableKey), []byte(publishableKey))
	secretOK := subtle.ConstantTimeCompare(pi.ClientSecretHash, payments.HashClientSecret(clientSecret))
	if keyOK&secretOK != 1 {
		return ErrBadCredentials
	}
	return nil
}

// Refund executes a refund once: the first call for a refund id records it
// and answers succeeded; later calls (a retry after a crash) answer from the
// record. The sandbox's card network never refuses a refund.
func (s *Sandbox) Refund(ctx context.Context, _ processor.Account, r processor.RefundRequest) (processor.RefundResult, error) {
	const q = `INSERT INTO sandbox_refunds (refund_id, payment_intent_id, amount, status) VALUES ($1, $2, $3, 'succeeded')
	ON CONFLICT (refund_id) DO UPDATE SET refund_id = EXCLUDED.refund_id
	RETURNING status`
	var status string
	if err := s.db.GetContext(ctx, &status, q, r.ID, r.PaymentIntentID, r.Amount); err != nil {
		return processor.RefundResult{}, &processor.Error{Op: "refund", Retryable: true, Code: "sandbox_unavailable", Err: err}
	}
	if s.latency > 0 {
		// Emulates a slow processor answering after it acted: the window in
		// which a worker can die having refunded but not yet recorded it.
		select {
		case <-time.After(s.latency):
		case <-ctx.Done():
			return processor.RefundResult{}, &processor.Error{Op: "refund", Retryable: true, Code: "timeout", Err: ctx.Err()}
		}
	}
	return processor.RefundResult{Succeeded: status == "succeeded", FailureReason: "declined"}, nil
}

// Evidence texts that decide a sandbox dispute (decisions.md §5).
const (
	EvidenceWinning = "winning_evidence"
	EvidenceLosing  = "losing_evidence"
)

// SubmitDisputeEvidence decides at once on uncategorized_text: winning
// evidence wins, losing evidence loses, anything else stays under review.
func (s *Sandbox) SubmitDisputeEvidence(_ context.Context, _ processor.Account, e processor.DisputeEvidence) (processor.DisputeDecision, error) {
	switch e.Evidence["uncategorized_text"] {
	case EvidenceWinning:
		return processor.DisputeDecision{Status: "won"}, nil
	case EvidenceLosing:
		return processor.DisputeDecision{Status: "lost"}, nil
	}
	return processor.DisputeDecision{Status: "under_review"}, nil
}

// ChargeCard charges a saved card once per key: the first call decides the
// outcome from the card's behaviour, saved with it (payments.CardDeclines
// declines every charge card_declined; the others succeed), and records
// it; later calls with the key (a retry after a crash) answer from the
// record. A card that is not the scope's is declined card_not_found.
func (s *Sandbox) ChargeCard(ctx context.Context, acct processor.Account, c processor.CardCharge) (processor.Outcome, error) {
	const charge = `INSERT INTO sandbox_card_charges (charge_key, merchant_id, livemode, card_id, amount, currency, succeeded, decline_code, last4)
	SELECT $1, $2, $3, $4, $5, $6, behavior <> 'declines', CASE WHEN behavior = 'declines' THEN 'card_declined' END, last4
	FROM sandbox_cards WHERE merchant_id = $2 AND livemode = $3 AND id = $4
	ON CONFLICT (charge_key) DO NOTHING`
	// A charge is recorded only of a saved card, whose behaviour never
	// changes: the answer reads the dispute card's from the card.
	const answer = `SELECT ch.succeeded, coalesce(ch.decline_code, '') AS decline_code, ch.last4,
		c.behavior = 'disputes' AS disputed
	FROM sandbox_card_charges ch JOIN sandbox_cards c ON c.id = ch.card_id AND c.merchant_id = ch.merchant_id AND c.livemode = ch.livemode
	WHERE ch.charge_key = $1 AND ch.merchant_id = $2 AND ch.livemode = $3`
	var r struct {
		Succeeded   bool   `db:"succeeded"`
		DeclineCode string `db:"decline_code"`
		Last4       string `db:"last4"`
		Disputed    bool   `db:"disputed"`
	}
	_, err := s.db.ExecContext(ctx, charge, c.Key, acct.MerchantID, acct.Live, c.CardID, c.Amount, c.Currency)
	if err == nil {
		err = s.db.GetContext(ctx, &r, answer, c.Key, acct.MerchantID, acct.Live)
	}
	if err == nil && s.latency > 0 {
		// As for refunds: the window in which a worker can die having
		// charged but not yet recorded it.
		select {
		case <-time.After(s.latency):
		case <-ctx.Done():
			return processor.Outcome{}, &processor.Error{Op: "charge_card", Retryable: true, Code: "timeout", Err: ctx.Err()}
		}
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return processor.Outcome{DeclineCode: "card_not_found"}, nil
	case err != nil:
		return processor.Outcome{}, &processor.Error{Op: "charge_card", Retryable: true, Code: "sandbox_unavailable", Err: err}
	}
	o := processor.Outcome{Succeeded: r.Succeeded, DeclineCode: r.DeclineCode, Last4: r.Last4}
	if r.Succeeded && r.Disputed {
		o.DisputeReason = disputeReason
	}
	return o, nil
}
