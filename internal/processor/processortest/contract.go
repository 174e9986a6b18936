// Package processortest is the contract suite of processor.Processor: what
// the service relies on from any card processor. It runs on the sandbox and
// on the Stripe adapter against stripe-mock.
package processortest

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"paysvc/internal/processor"
)

// Harness is how the suite drives one implementation.
type Harness struct {
	// New returns the processor under test.
	New func(t *testing.T) processor.Processor
	// Account returns a fresh merchant account in the mode asked, known to
	// the processor (for the sandbox: a merchants row).
	Account func(t *testing.T, live bool) processor.Account
	// Unavailable returns the processor with its backend gone (a closed
	// database, an unreachable API): calls that need the backend must fail
	// with a retryable *processor.Error. Nil skips those checks.
	Unavailable func(t *testing.T) processor.Processor
	// WinningEvidence and LosingEvidence are uncategorized_text values the
	// processor decides at once as won and lost. Empty: the processor
	// decides later, and every submission must answer under_review.
	WinningEvidence, LosingEvidence string
	// NewID returns a fresh id with prefix, as the service makes them.
	NewID func(prefix string) string
	// Stateless is a backend that answers canned objects (stripe-mock):
	// checks that need it to vary its answers (two client secrets) are
	// skipped; every request is still made and must succeed.
	Stateless bool
	// Paid, when set, makes a payment id known to the processor as paid
	// and disputed, as its own events would (for Stripe: the id map its
	// webhooks fill); refunds and evidence name such payments.
	Paid func(t *testing.T, acct processor.Account, paymentID string)
}

func (h Harness) paid(t *testing.T, acct processor.Account) string {
	id := h.NewID("pi_")
	if h.Paid != nil {
		h.Paid(t, acct, id)
	}
	return id
}

// Run runs the contract on h.
func Run(t *testing.T, h Harness) {
	ctx := context.Background()
	p := h.New(t)

	t.Run("CreateCheckoutSession", func(t *testing.T) {
		acct := h.Account(t, false)
		cs := processor.CheckoutSession{ID: h.NewID("cs_"), Currency: "usd", AmountTotal: 1999,
			SuccessURL: "https://shop.example/ok", CancelURL: "https://shop.example/cart"}
		first, err := p.CreateCheckoutSession(ctx, acct, cs)
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		if u, err := url.Parse(first.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			t.Errorf("URL: got %q, want an absolute http(s) URL", first.URL)
		}
		// The session id is the idempotency key: asking again (a retry) gets
		// the same page.
		again, err := p.CreateCheckoutSession(ctx, acct, cs)
		if err != nil || again.URL != first.URL {
			t.Errorf("create again: got %q, %v, want %q", again.URL, err, first.URL)
		}
	})

	t.Run("CreatePaymentIntent", func(t *testing.T) {
		for _, live := range []bool{false, true} {
			acct := h.Account(t, live)
			a, err := p.CreatePaymentIntent(ctx, acct, processor.PaymentIntent{ID: h.NewID("pi_"), Amount: 1500, Currency: "usd"})
			if err != nil {
				t.Fatalf("live=%v: create: %v", live, err)
			}
			b, err := p.CreatePaymentIntent(ctx, acct, processor.PaymentIntent{ID: h.NewID("pi_"), Amount: 700, Currency: "eur"})
			if err != nil {
				t.Fatalf("live=%v: create second: %v", live, err)
			}
			prefix := "pk_test_"
			if live {
				prefix = "pk_live_"
			}
			if !strings.HasPrefix(a.PublishableKey, prefix) || a.AccountID == "" {
				t.Errorf("live=%v: got publishable key %q, account %q, want %s… and an account", live, a.PublishableKey, a.AccountID, prefix)
			}
			if a.ClientSecret == "" || (!h.Stateless && a.ClientSecret == b.ClientSecret) {
				t.Errorf("live=%v: client secrets %q and %q: want two different, non-empty", live, a.ClientSecret, b.ClientSecret)
			}
			if a.PublishableKey != b.PublishableKey || a.AccountID != b.AccountID {
				t.Errorf("live=%v: one account gave keys %q/%q and accounts %q/%q, want the same", live,
					a.PublishableKey, b.PublishableKey, a.AccountID, b.AccountID)
			}
			other, err := p.CreatePaymentIntent(ctx, h.Account(t, live), processor.PaymentIntent{ID: h.NewID("pi_"), Amount: 100, Currency: "usd"})
			// The publishable key may be the platform's (Stripe's, shared by
			// every connected account); the account is the merchant's own.
			if err != nil || other.AccountID == a.AccountID || !strings.HasPrefix(other.PublishableKey, prefix) {
				t.Errorf("live=%v: another merchant got account %q key %q (%v), want its own account and a %s… key", live, other.AccountID, other.PublishableKey, err, prefix)
			}
		}
	})

	t.Run("Account", func(t *testing.T) {
		for _, live := range []bool{false, true} {
			acct := h.Account(t, live)
			a, err := p.Account(ctx, acct)
			if err != nil {
				t.Fatalf("live=%v: account: %v", live, err)
			}
			cv, err := p.CreatePaymentIntent(ctx, acct, processor.PaymentIntent{ID: h.NewID("pi_"), Amount: 100, Currency: "usd"})
			if err != nil {
				t.Fatalf("live=%v: create: %v", live, err)
			}
			if !strings.HasPrefix(a.ID, "acct_") || a.ID != cv.AccountID {
				t.Errorf("live=%v: account id %q, payments name %q: want one acct_ id", live, a.ID, cv.AccountID)
			}
			if len(a.Country) != 2 || len(a.DefaultCurrency) != 3 || (a.BankName == "") != (a.BankLast4 == "") || (a.BankLast4 != "" && len(a.BankLast4) != 4) {
				t.Errorf("live=%v: got %+v, want a country, a currency and a bank masked to name and last4 (or none)", live, a)
			}
		}
	})

	t.Run("Refund is idempotent by id", func(t *testing.T) {
		acct := h.Account(t, false)
		r := processor.RefundRequest{ID: h.NewID("re_"), PaymentIntentID: h.paid(t, acct), Amount: 500, Currency: "usd"}
		first, err := p.Refund(ctx, acct, r)
		if err != nil {
			t.Fatalf("refund: %v", err)
		}
		if !first.Succeeded && first.FailureReason == "" {
			t.Errorf("refund: got %+v, want succeeded or a failure reason", first)
		}
		// A retry after a crash asks again with the same id: the first
		// answer, whatever the request says now.
		r2 := r
		r2.Amount = 400
		again, err := p.Refund(ctx, acct, r2)
		if err != nil || again != first {
			t.Errorf("refund again: got %+v, %v, want %+v", again, err, first)
		}
	})

	t.Run("SubmitDisputeEvidence", func(t *testing.T) {
		acct := h.Account(t, false)
		cases := []struct{ text, want string }{
			{"the goods were delivered", "under_review"},
			{h.WinningEvidence, "won"},
			{h.LosingEvidence, "lost"},
		}
		for _, c := range cases {
			if c.text == "" {
				continue // this processor decides later
			}
			d, err := p.SubmitDisputeEvidence(ctx, acct, processor.DisputeEvidence{ID: h.NewID("dp_"), PaymentIntentID: h.paid(t, acct),
				Evidence: map[string]string{"uncategorized_text": c.text}})
			if err != nil || d.Status != c.want {
				t.Errorf("evidence %q: got %q, %v, want %s", c.text, d.Status, err, c.want)
			}
		}
	})

	t.Run("errors are *processor.Error", func(t *testing.T) {
		if h.Unavailable == nil {
			t.Skip("no way to make this processor unavailable")
		}
		down := h.Unavailable(t)
		acct := h.Account(t, false)
		_, err1 := down.CreatePaymentIntent(ctx, acct, processor.PaymentIntent{ID: h.NewID("pi_"), Amount: 100, Currency: "usd"})
		_, err2 := down.Refund(ctx, acct, processor.RefundRequest{ID: h.NewID("re_"), PaymentIntentID: h.paid(t, acct), Amount: 100, Currency: "usd"})
		for name, err := range map[string]error{"CreatePaymentIntent": err1, "Refund": err2} {
			var pe *processor.Error
			if !errors.As(err, &pe) {
				t.Errorf("%s with the backend gone: got %v (%T), want a *processor.Error", name, err, err)
				continue
			}
			if !pe.Retryable || pe.Op == "" || pe.Code == "" {
				t.Errorf("%s with the backend gone: got %+v, want retryable with op and code", name, pe)
			}
		}
	})
}
