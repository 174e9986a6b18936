package payments

import "context"

// PayoutAll pays out the scope's whole available balance in currency (or, when
// currency is empty, in the only currency it holds): one payout entry, under
// the balance's lock, so a refund racing it sees the balance after it.
func (s *Service) PayoutAll(ctx context.Context, sc Scope, currency string) (Money, error) {
	if currency != "" {
		cur, err := checkCurrency("currency", &currency)
		if err != nil {
			return Money{}, err
		}
		currency = cur
	}
	if _, err := s.store.MerchantPlan(ctx, sc.MerchantID); err != nil {
		return Money{}, err // no such merchant
	}
	now := s.clock.Now(ctx, sc)
	return s.store.Payout(ctx, sc, currency, func(b Balance) (Effects, error) {
		amount := b.Available()
		if amount <= 0 {
			return Effects{}, nil
		}
		return Effects{Ledger: []LedgerEntry{newEntry(LedgerPayout, -amount, b.Currency, NewID("po_"), now)}}, nil
	})
}
