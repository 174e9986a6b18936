package sandbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/testenv"
)

// TestAccountMadeInARequest: a merchant's first payment intent, created in
// an idempotent request, makes the merchant's sandbox account in the
// request's transaction. On a pool of one connection, which the request
// holds, it is made without waiting for a second (behind a
// transaction-mode pooler every server connection may be held by requests
// waiting so). When the request rolls back, the account made in it is not
// remembered, even when found again in the same request: the next payment
// gets the account that was committed.
func TestAccountMadeInARequest(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	db.SetMaxOpenConns(1) // before postgres.New, which sizes its request slots by it
	store := postgres.New(db)
	svc := payments.NewService(store, nil, time.Now,
		payments.WithProcessor(sandbox.New(db, "http://checkout.test").WithRequests(store.InRequest)))
	m, err := svc.CreateMerchant(ctx, "One connection", "", payments.PlanFree)
	if err != nil {
		t.Fatal(err)
	}
	sc := payments.Scope{MerchantID: m.ID}
	amount, cur := int64(1500), "usd"
	in := payments.IntentInput{Amount: &amount, Currency: &cur}

	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	reqCtx, rec, err := store.BeginIdempotent(rctx, sc, payments.NewID("key_"), []byte("hash"), time.Now(), time.Hour, time.Second)
	if err != nil || rec != nil {
		t.Fatalf("claim: %v, %v", rec, err)
	}
	var inRequest payments.IntentCreated
	for i := range 2 { // the second finds the account the first made, not committed yet
		if inRequest, err = svc.CreateIntent(reqCtx, sc, in); err != nil {
			t.Fatalf("payment intent %d in a request holding the pool's one connection: %v (waited for a second?)", i+1, err)
		}
	}
	if err := store.EndRequest(reqCtx, false); err != nil {
		t.Fatal(err)
	}

	after, err := svc.CreateIntent(ctx, sc, in)
	if err != nil {
		t.Fatal(err)
	}
	var committed string
	err = db.GetContext(ctx, &committed, `SELECT publishable_key FROM sandbox_accounts WHERE merchant_id = $1 AND NOT livemode`, m.ID)
	if errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("after the request rolled back, no account committed, yet the next payment got publishable key %q (the rolled-back request's: %q)",
			after.PublishableKey, inRequest.PublishableKey)
	} else if err != nil {
		t.Fatal(err)
	}
	if after.PublishableKey != committed {
		t.Errorf("after the request rolled back: publishable key %q, want the committed account's %q (the rolled-back request's was %q)",
			after.PublishableKey, committed, inRequest.PublishableKey)
	}
}
