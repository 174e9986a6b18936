package postgres_test

import (
	"context"
	"testing"
	"time"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/testenv"
)

// TestEndpointFailuresPageReadsOnlyThem: a page of an endpoint's failed
// (or pending) deliveries reads those deliveries, not every delivery of the
// endpoint, and every kind of delivery-log page keeps its generic plan.
func TestEndpointFailuresPageReadsOnlyThem(t *testing.T) {
	t.Parallel()
	db, store, sc := soloMerchant(t)
	ctx := context.Background()
	const ep = "we_pages"
	// 20,000 deliveries of their events over three weeks, all succeeded but
	// four failed and two pending (old ones: a page of them must not walk
	// back through the endpoint's history).
	for _, q := range []string{
		`INSERT INTO webhook_endpoints (id, merchant_id, livemode, url, events, status, secret_sealed)
		VALUES ($2, $1, false, 'https://example.com/hooks', '["*"]', 'enabled', '\x00')`,
		`INSERT INTO events (id, merchant_id, livemode, type, data, created_at)
		SELECT 'evt_seed' || g, $1, false, 'payment_intent.succeeded', '{}', now() - g * interval '90 seconds'
		FROM generate_series(1, 20000) g WHERE $2 <> ''`,
		`INSERT INTO webhook_deliveries (id, merchant_id, livemode, event_id, endpoint_id, status, attempts, next_attempt_at, created_at, event_created_at)
		SELECT 'whd_seed' || g, $1, false, e.id, $2,
			CASE WHEN g % 5000 = 0 THEN 'failed' WHEN g IN (12007, 15011) THEN 'pending' ELSE 'succeeded' END,
			1, now(), e.created_at, e.created_at
		FROM events e, CAST(substr(e.id, 9) AS int) g WHERE e.merchant_id = $1`,
	} {
		if _, err := db.ExecContext(ctx, q, sc.MerchantID, ep); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(ctx, `ANALYZE events, webhook_deliveries`); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		status string
		rows   int
		more   bool
		read   int64 // at most, of webhook_deliveries
	}{
		{payments.DeliveryFailed, 4, false, 20},
		{payments.DeliveryPending, 2, false, 20},
		{payments.DeliverySucceeded, 10, true, 30},
		{"", 10, true, 20},
	} {
		before := tuplesRead(t, db, "webhook_deliveries")
		p, err := store.EndpointDeliveries(ctx, sc, ep, payments.DeliveryFilter{ListParams: payments.ListParams{Limit: 10}, Status: tc.status})
		if err != nil {
			t.Fatal(err)
		}
		read := tuplesRead(t, db, "webhook_deliveries") - before
		if len(p.Data) != tc.rows || p.HasMore != tc.more {
			t.Errorf("status %q: got %d deliveries (has_more %v), want %d (%v)", tc.status, len(p.Data), p.HasMore, tc.rows, tc.more)
		}
		for _, d := range p.Data {
			if tc.status != "" && d.Status != tc.status {
				t.Errorf("status %q: got a delivery %s %s", tc.status, d.ID, d.Status)
			}
		}
		if read > tc.read {
			t.Errorf("status %q: the page read %d deliveries; want at most %d, not the endpoint's 20,000", tc.status, read, tc.read)
		}
	}

	if testenv.PoolMode() == postgres.PoolTransaction {
		return // nothing is prepared behind a transaction-mode pooler
	}
	for _, f := range []payments.DeliveryFilter{
		{},
		{Status: payments.DeliveryFailed},
		{Status: payments.DeliverySucceeded, ListParams: payments.ListParams{StartingAfter: "whd_seed3"}},
	} {
		f.Limit = 10
		for range 12 {
			if _, err := store.EndpointDeliveries(ctx, sc, ep, f); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Every status's first page, and succeeded's after a cursor.
	wantGenericPlans(t, db, `%FROM webhook_deliveries d%ORDER BY d.created_at DESC, d.id DESC LIMIT 11)%`, 5)
}

// TestDeliveryLogPageIsOneStatement: a page of a live endpoint's deliveries
// is one round trip, the endpoint's check inside it; the deliveries of a
// deleted endpoint, of another merchant's endpoint or of an unknown one are
// endpoint_not_found, with a cursor or without; a live endpoint without
// deliveries has an empty page.
func TestDeliveryLogPageIsOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rt := testenv.CountRoundTrips(t, testenv.DatabaseURL(t))
	db, err := postgres.OpenMode(ctx, rt.URL, 1, testenv.PoolMode(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	store := postgres.New(db)
	var scopes []payments.Scope
	for range 2 {
		m := payments.Merchant{ID: payments.NewID("mch_"), Name: t.Name(), Plan: payments.PlanFree, Created: time.Now()}
		if err := store.CreateMerchant(ctx, m); err != nil {
			t.Fatal(err)
		}
		scopes = append(scopes, payments.Scope{MerchantID: m.ID})
	}
	sc, other := scopes[0], scopes[1]
	live, gone, empty := payments.NewID("we_"), payments.NewID("we_"), payments.NewID("we_")
	for _, q := range []string{
		`INSERT INTO webhook_endpoints (id, merchant_id, livemode, url, events, status, secret_sealed, deleted_at)
		SELECT id, $1, false, 'https://example.com/hooks', '["*"]', 'enabled', '\x00', CASE WHEN id = $3 THEN now() END
		FROM unnest(ARRAY[$2, $3, $4]) id`,
		`INSERT INTO events (id, merchant_id, livemode, type, data, created_at)
		SELECT $2 || '_' || g, $1, false, 'payment_intent.succeeded', '{}', now() - g * interval '1 minute'
		FROM generate_series(1, 30) g WHERE $3 <> $4`,
		`INSERT INTO webhook_deliveries (id, merchant_id, livemode, event_id, endpoint_id, status, attempts, next_attempt_at, created_at, event_created_at)
		SELECT 'whd_' || ep || e.id, $1, false, e.id, ep, 'succeeded', 1, now(), e.created_at, e.created_at
		FROM events e, unnest(ARRAY[$2, $3]) ep WHERE e.merchant_id = $1 AND $4 <> ''`,
	} {
		if _, err := db.ExecContext(ctx, q, sc.MerchantID, live, gone, empty); err != nil {
			t.Fatal(err)
		}
	}

	first := payments.DeliveryFilter{ListParams: payments.ListParams{Limit: 10}}
	for range 6 { // prepared (session mode), and past the custom plans
		if _, err := store.EndpointDeliveries(ctx, sc, live, first); err != nil {
			t.Fatal(err)
		}
	}
	before := rt.Trips()
	p, err := store.EndpointDeliveries(ctx, sc, live, first)
	if err != nil {
		t.Fatal(err)
	}
	if trips := rt.Trips() - before; trips != 1 {
		t.Errorf("a page of a live endpoint took %d round trips, want 1", trips)
	}
	if len(p.Data) != 10 || !p.HasMore {
		t.Fatalf("live endpoint: got %d deliveries (has_more %v), want 10 and more", len(p.Data), p.HasMore)
	}
	next := first
	next.StartingAfter = p.Data[9].ID
	if p, err := store.EndpointDeliveries(ctx, sc, live, next); err != nil || len(p.Data) != 10 {
		t.Fatalf("second page: %d deliveries, %v; want 10", len(p.Data), err)
	}
	if p, err := store.EndpointDeliveries(ctx, sc, empty, first); err != nil || len(p.Data) != 0 || p.HasMore {
		t.Errorf("endpoint without deliveries: got %d deliveries (has_more %v), %v; want an empty page", len(p.Data), p.HasMore, err)
	}

	for _, tc := range []struct {
		name string
		sc   payments.Scope
		ep   string
	}{
		{"deleted endpoint", sc, gone},
		{"another merchant's endpoint", other, live},
		{"unknown endpoint", sc, "we_unknown"},
	} {
		for _, f := range []payments.DeliveryFilter{first, next} {
			_, err := store.EndpointDeliveries(ctx, tc.sc, tc.ep, f)
			if code := payments.ErrorCode(err); code != payments.EndpointNotFound {
				t.Errorf("%s, starting_after %q: got %v (%s), want endpoint_not_found", tc.name, f.StartingAfter, err, code)
			}
		}
	}
}
