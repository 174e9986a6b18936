package postgres_test

import (
	"context"
	"strconv"
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
		`INSERT INTO webhook_deliveries (id, merchant_id, livemode, event_id, event_type, endpoint_id, status, attempts, last_response_body, next_attempt_at, created_at, event_created_at)
		SELECT 'whd_seed' || g, $1, false, e.id, e.type, $2,
			CASE WHEN g % 5000 = 0 THEN 'failed' WHEN g IN (12007, 15011) THEN 'pending' ELSE 'succeeded' END,
			1, '', now(), e.created_at, e.created_at
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
	wantGenericPlans(t, db, deliveryPagePattern, 5)
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
		`INSERT INTO webhook_deliveries (id, merchant_id, livemode, event_id, event_type, endpoint_id, status, attempts, last_response_body, next_attempt_at, created_at, event_created_at)
		SELECT 'whd_' || ep || e.id, $1, false, e.id, e.type, ep, 'succeeded', 1, 'ok', now(), e.created_at, e.created_at
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

// deliveryPagePattern matches the statements of delivery-log first pages
// (LIMIT 11) in pg_prepared_statements.
const deliveryPagePattern = `%FROM webhook_deliveries d WHERE d.merchant_id = $1%ORDER BY d.created_at DESC, d.id DESC LIMIT 11%`

// TestSmallEndpointPageIsPlannedOnce: the delivery log of an endpoint with
// a few deliveries, beside another merchant's endpoint with many, in weekly
// partitions as maintenance leaves them, keeps its generic plan. For such
// an endpoint the planner estimates about one delivery per partition, and
// with the page joined to its events and attempts a custom plan looked
// cheaper than the generic one, so every call was planned again (2.4 ms on
// the bench's seven partitions) and the plan sorted every delivery of the
// endpoint.
func TestSmallEndpointPageIsPlannedOnce(t *testing.T) {
	t.Parallel()
	db, store, big := soloMerchant(t)
	ctx := context.Background()
	m := payments.Merchant{ID: payments.NewID("mch_"), Name: t.Name(), Plan: payments.PlanFree, Created: time.Now()}
	if err := store.CreateMerchant(ctx, m); err != nil {
		t.Fatal(err)
	}
	small := payments.Scope{MerchantID: m.ID}
	// Over four weeks: 20,000 deliveries to the big endpoint, 200 to the
	// small one, one in 100 of them failed.
	for _, seed := range []struct {
		sc payments.Scope
		ep string
		n  int
	}{{big, "we_big", 20000}, {small, "we_small", 200}} {
		for _, q := range []string{
			`INSERT INTO webhook_endpoints (id, merchant_id, livemode, url, events, status, secret_sealed)
			SELECT $2, $1, false, 'https://example.com/hooks', '["*"]', 'enabled', '\x00' WHERE $3::int > 0`,
			`INSERT INTO events (id, merchant_id, livemode, type, data, created_at)
			SELECT $2 || '_evt' || g, $1, false, 'payment_intent.succeeded', '{}', now() - g * (interval '28 days' / $3::int)
			FROM generate_series(1, $3::int) g`,
			`INSERT INTO webhook_deliveries (id, merchant_id, livemode, event_id, event_type, endpoint_id, status, attempts, last_response_body, next_attempt_at, created_at, event_created_at)
			SELECT 'whd_' || e.id, $1, false, e.id, e.type, $2, CASE WHEN row_number() OVER () % 100 = 0 THEN 'failed' ELSE 'succeeded' END,
				1, 'ok', now(), e.created_at, e.created_at
			FROM events e WHERE e.merchant_id = $1 AND $3 > 0`,
		} {
			if _, err := db.ExecContext(ctx, q, seed.sc.MerchantID, seed.ep, seed.n); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := store.MaintainPartitions(ctx, time.Now(), forever, forever); err != nil {
		t.Fatal(err)
	}
	var parts int
	if err := db.GetContext(ctx, &parts, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'webhook_deliveries'::regclass`); err != nil {
		t.Fatal(err)
	}
	if parts < 5 {
		t.Fatalf("webhook_deliveries has %d partitions; want the seeds' weeks, the next and the default", parts)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE events, webhook_deliveries`); err != nil {
		t.Fatal(err)
	}

	if testenv.PoolMode() == postgres.PoolTransaction {
		return // nothing is prepared behind a transaction-mode pooler
	}
	for _, f := range []payments.DeliveryFilter{{}, {Status: payments.DeliveryFailed}} {
		f.Limit = 10
		for range 12 {
			p, err := store.EndpointDeliveries(ctx, small, "we_small", f)
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Data) != 2 && len(p.Data) != 10 || p.Data[0].EventType != "payment_intent.succeeded" {
				t.Fatalf("status %q: got %d deliveries, the first %+v", f.Status, len(p.Data), p.Data[0])
			}
		}
	}
	wantGenericPlans(t, db, deliveryPagePattern, 2)
}

// TestLegacyDeliveriesInTheLog: deliveries written without the delivery
// log's own columns (before migration 0020, or by the previous version
// during an upgrade) show their event's type and their last attempt's
// response, read from the events and attempts, in a page and alone.
func TestLegacyDeliveriesInTheLog(t *testing.T) {
	t.Parallel()
	db, store, sc := soloMerchant(t)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO webhook_endpoints (id, merchant_id, livemode, url, events, status, secret_sealed)
		VALUES ('we_log', $1, false, 'https://example.com/hooks', '["*"]', 'enabled', '\x00')`,
		`INSERT INTO events (id, merchant_id, livemode, type, data, created_at)
		SELECT 'evt_' || n, $1, false, 'charge.refunded', '{}', now() - g * interval '1 minute'
		FROM unnest(ARRAY['old', 'unsent', 'new', 'mixed']) WITH ORDINALITY AS t(n, g)`,
		// old: a legacy delivery attempted twice; unsent: a legacy one not
		// attempted; new: written and attempted by this version; mixed:
		// written by this version, attempted by the previous one.
		`INSERT INTO webhook_deliveries (id, merchant_id, livemode, event_id, event_type, endpoint_id, status, attempts, last_response_body, next_attempt_at, created_at, event_created_at)
		SELECT 'whd_' || substr(e.id, 5), $1, false, e.id, CASE WHEN e.id IN ('evt_new', 'evt_mixed') THEN e.type END, 'we_log',
			CASE WHEN e.id = 'evt_unsent' THEN 'pending' ELSE 'succeeded' END,
			CASE e.id WHEN 'evt_old' THEN 2 WHEN 'evt_unsent' THEN 0 ELSE 1 END,
			CASE WHEN e.id = 'evt_new' THEN 'new body' END, now(), e.created_at, e.created_at
		FROM events e WHERE e.merchant_id = $1`,
		`INSERT INTO webhook_attempts (id, merchant_id, livemode, delivery_id, http_status, response_body, created_at, event_created_at)
		SELECT 'wha_' || a.n, $1, false, a.d, 200, a.body, e.created_at + a.after, e.created_at
		FROM (VALUES ('1', 'whd_old', 'first body', interval '1 second'), ('2', 'whd_old', 'second body', interval '2 seconds'),
			('3', 'whd_new', 'new body', interval '1 second'), ('4', 'whd_mixed', 'previous version''s body', interval '1 second')) a(n, d, body, after)
		JOIN events e ON e.id = 'evt_' || substr(a.d, 5)`,
	} {
		if _, err := db.ExecContext(ctx, q, sc.MerchantID); err != nil {
			t.Fatal(err)
		}
	}
	body := func(s string) *string { return &s }
	want := map[string]*string{"whd_old": body("second body"), "whd_unsent": nil, "whd_new": body("new body"), "whd_mixed": body("previous version's body")}
	check := func(d payments.DeliveryRecord) {
		t.Helper()
		w, ok := want[d.ID]
		if !ok {
			t.Fatalf("unexpected delivery %s", d.ID)
		}
		if d.EventType != "charge.refunded" {
			t.Errorf("%s: event_type %q, want charge.refunded", d.ID, d.EventType)
		}
		if (w == nil) != (d.LastResponseBody == nil) || w != nil && *w != *d.LastResponseBody {
			t.Errorf("%s: last_response_body %v, want %v", d.ID, fmtPtr(d.LastResponseBody), fmtPtr(w))
		}
	}
	p, err := store.EndpointDeliveries(ctx, sc, "we_log", payments.DeliveryFilter{ListParams: payments.ListParams{Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Data) != len(want) {
		t.Fatalf("got %d deliveries, want %d", len(p.Data), len(want))
	}
	for _, d := range p.Data {
		check(d)
		one, err := store.EndpointDelivery(ctx, sc, "we_log", d.ID)
		if err != nil {
			t.Fatal(err)
		}
		check(one)
	}
}

func fmtPtr(s *string) string {
	if s == nil {
		return "null"
	}
	return strconv.Quote(*s)
}
