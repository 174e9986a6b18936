package payments

import (
	"context"
	"crypto/sha256"
	"time"

	"paysvc/internal/processor"
)

// Payment statuses (Stripe's vocabulary).
const (
	IntentRequiresPaymentMethod = "requires_payment_method"
	IntentProcessing            = "processing"
	IntentSucceeded             = "succeeded"
	IntentCanceled              = "canceled"
)

// PaymentIntent is a payment: from a checkout session or the embedded flow.
type PaymentIntent struct {
	ID             string
	Live           bool
	Amount         int64
	AmountReceived int64
	Currency       string
	Status         string
	Fee            int64
	// What has been refunded, and what pending refunds are taking.
	AmountRefunded      int64
	AmountRefundPending int64
	DisputeID           *string
	CustomerID          *string
	CustomerName        *string
	CustomerEmail       *string
	Description         *string
	Metadata            map[string]string
	SessionID           *string
	SubscriptionID      *string // a charge of a subscription
	ClientSecretHash    []byte
	Source              *string
	Device              *string
	CardLast4           *string
	LastDeclineCode     *string
	SucceededAt         *time.Time
	Created             time.Time
}

// IntentInput is the body of POST /v1/payment-intents.
type IntentInput struct {
	Amount             *int64        `json:"amount"`
	Currency           *string       `json:"currency"`
	Description        *string       `json:"description"`
	CustomerEmail      *string       `json:"customer_email"`
	PassFeesToCustomer *bool         `json:"pass_fees_to_customer"`
	Metadata           MetadataInput `json:"metadata"`
	Source             *string       `json:"source"`
	Device             *string       `json:"device"`
}

// IntentCreated are the six client values returned on creation.
type IntentCreated struct {
	ClientSecret    string `json:"client_secret"`
	PaymentIntentID string `json:"payment_intent_id"`
	PublishableKey  string `json:"publishable_key"`
	AccountID       string `json:"processor_account"`
	Amount          int64  `json:"amount"`
	Currency        string `json:"currency"`
}

func (in *IntentInput) validate() (string, error) {
	if err := checkAmount("amount", in.Amount); err != nil {
		return "", err
	}
	cur, err := checkCurrency("currency", in.Currency)
	if err != nil {
		return "", err
	}
	for field, v := range map[string]*string{"description": in.Description, "source": in.Source, "device": in.Device} {
		if err := checkText(field, v, false); err != nil {
			return "", err
		}
	}
	if in.CustomerEmail != nil {
		if err := checkEmail("customer_email", *in.CustomerEmail); err != nil {
			return "", err
		}
	}
	return cur, checkMetadata(in.Metadata)
}

// HashClientSecret is the stored form of a client secret.
func HashClientSecret(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// CreateIntent creates an embedded payment intent; only the hash of its
// client secret is kept. Codes: validation_error, processor_error.
func (s *Service) CreateIntent(ctx context.Context, sc Scope, in IntentInput) (IntentCreated, error) {
	cur, err := in.validate()
	if err != nil {
		return IntentCreated{}, err
	}
	now := s.clock.Now(ctx, sc)
	pi := PaymentIntent{
		ID: NewID("pi_"), Live: sc.Live, Amount: *in.Amount, Currency: cur, Status: IntentRequiresPaymentMethod,
		CustomerEmail: in.CustomerEmail, Description: in.Description, Metadata: mergeMetadata(nil, in.Metadata),
		Source: in.Source, Device: in.Device, Created: now,
	}
	if in.PassFeesToCustomer != nil && *in.PassFeesToCustomer {
		plan, err := s.store.MerchantPlan(ctx, sc.MerchantID)
		if err != nil {
			return IntentCreated{}, err
		}
		pi.Amount = GrossUp(plan, cur, pi.Amount)
		if pi.Amount > MaxAmount {
			return IntentCreated{}, Invalid("amount", "with fees passed on exceeds %d", MaxAmount)
		}
	}
	cv, err := s.proc.CreatePaymentIntent(ctx, account(sc), processor.PaymentIntent{ID: pi.ID, Amount: pi.Amount, Currency: cur})
	if err != nil {
		return IntentCreated{}, err
	}
	pi.ClientSecretHash = HashClientSecret(cv.ClientSecret)
	if err := s.store.CreateIntent(ctx, sc, pi); err != nil {
		return IntentCreated{}, err
	}
	return IntentCreated{
		ClientSecret: cv.ClientSecret, PaymentIntentID: pi.ID, PublishableKey: cv.PublishableKey,
		AccountID: cv.AccountID, Amount: pi.Amount, Currency: cur,
	}, nil
}

// TestPayments lists the test-mode payments. A live key gets validation_error.
func (s *Service) TestPayments(ctx context.Context, sc Scope, lp ListParams) (Page[PaymentIntent], error) {
	if sc.Live {
		return Page[PaymentIntent]{}, Errorf(ValidationError, "GET /v1/test-payments requires a test-mode key (svc_test_…).")
	}
	return s.store.Payments(ctx, sc, lp)
}

// succeed marks a payment paid in full and fixes its fee. Its effect is
// the balance's credit of the amount net of the fee.
func (pi *PaymentIntent) succeed(plan Plan, last4 string, now time.Time) Effects {
	return pi.succeedWithFee(Fee(plan, pi.Currency, pi.Amount), last4, now)
}

// succeedWithFee is succeed with the platform's fee given: what a processor
// took on its own terms (a Stripe invoice's percentage, InvoiceFee).
func (pi *PaymentIntent) succeedWithFee(fee int64, last4 string, now time.Time) Effects {
	pi.Status = IntentSucceeded
	pi.AmountReceived = pi.Amount
	pi.Fee = fee
	pi.SucceededAt = &now
	pi.LastDeclineCode = nil
	if last4 != "" {
		pi.CardLast4 = &last4
	}
	credit := newEntry(LedgerPayment, pi.AmountReceived-pi.Fee, pi.Currency, pi.ID, now)
	credit.Fee = pi.Fee
	return Effects{Ledger: []LedgerEntry{credit}}
}

func (pi *PaymentIntent) decline(declineCode, last4 string) {
	pi.Status = IntentRequiresPaymentMethod
	pi.LastDeclineCode = &declineCode
	if last4 != "" {
		pi.CardLast4 = &last4
	}
}

// ErrAlreadyPaid is returned when a confirmation reaches a payment that
// already succeeded: the caller shows success without charging again.
var ErrAlreadyPaid = Errorf(ValidationError, "This payment has already succeeded.")

// applyChargeSucceeded applies charge.succeeded to an embedded payment,
// with payment_intent.succeeded. A payment that already succeeded is left
// alone (ErrAlreadyPaid): confirming twice charges once.
func (s *Service) applyChargeSucceeded(ctx context.Context, a *application) error {
	return s.applyCharge(ctx, a, true)
}

// applyChargeFailed applies charge.failed to an embedded payment: the
// decline is recorded, with payment_intent.payment_failed.
func (s *Service) applyChargeFailed(ctx context.Context, a *application) error {
	return s.applyCharge(ctx, a, false)
}

func (s *Service) applyCharge(ctx context.Context, a *application, succeeded bool) error {
	_, err := s.store.UpdateIntentByID(ctx, a.ev.PaymentIntentID, func(sc Scope, plan Plan, pi *PaymentIntent) (Effects, error) {
		if !a.inScope(sc) {
			return Effects{}, NotFound(PaymentNotFound, pi.ID)
		}
		if pi.Status == IntentSucceeded {
			return Effects{}, ErrAlreadyPaid
		}
		now := s.clock.Now(ctx, sc)
		if !succeeded {
			pi.decline(a.ev.Data.DeclineCode, a.ev.Data.CardLast4)
			return a.effects(Effects{Events: []Event{newEvent(EventPaymentFailed, pi.Object(), now)}}, pi.ID, now), nil
		}
		eff := pi.succeed(plan, a.ev.Data.CardLast4, now)
		eff.Events = []Event{newEvent(EventPaymentSucceeded, pi.Object(), now)}
		return a.effects(eff, pi.ID, now), nil
	})
	return err
}

// IntentForConfirm reads a payment by id alone, for the processor's confirm
// endpoint, which authenticates with the client secret. Codes: payment_not_found.
func (s *Service) IntentForConfirm(ctx context.Context, id string) (Scope, PaymentIntent, error) {
	return s.store.IntentByID(ctx, id)
}
