package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"paysvc/internal/payments"
)

// TestTypedEventPageReadsOnlyItsPage: a page of GET /v1/events filtered by
// type reads about a page of rows however many events the merchant has
// that are not of the type — with a type predicate on events_page, a page
// for a type the merchant had none of read every one of its events (or the
// planner scanned the whole table).
func TestTypedEventPageReadsOnlyItsPage(t *testing.T) {
	t.Parallel()
	db, store, sc := soloMerchant(t)
	ctx := context.Background()
	// 20,000 payments over the last three weeks (three partitions and
	// more), analyzed: by the statistics, every event is a payment.
	const many = 20000
	if _, err := db.ExecContext(ctx, `INSERT INTO events (id, merchant_id, livemode, type, data, created_at)
		SELECT 'evt_seed' || g, $1, false, 'payment_intent.succeeded', '{}', now() - g * interval '90 seconds'
		FROM generate_series(1, $2::int) g`, sc.MerchantID, many); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE events`); err != nil {
		t.Fatal(err)
	}
	// And four refunds among them.
	if _, err := db.ExecContext(ctx, `INSERT INTO events (id, merchant_id, livemode, type, data, created_at)
		SELECT 'evt_refund' || g, $1, false, 'charge.refunded', '{}', now() - g * interval '5 hours'
		FROM generate_series(1, 4) g`, sc.MerchantID); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name  string
		types []string
		rows  int
		more  bool
	}{
		{"a type it has none of", []string{payments.EventDisputeCreated}, 0, false},
		{"a prefix it has few of", []string{payments.EventChargeRefunded, payments.EventDisputeCreated, payments.EventDisputeClosed}, 4, false},
		{"the type of most", []string{payments.EventPaymentSucceeded}, 10, true},
		{"two types", []string{payments.EventPaymentSucceeded, payments.EventChargeRefunded}, 10, true},
	} {
		before := tuplesRead(t, db, "events")
		p, err := store.EventPage(ctx, sc, payments.EventFilter{ListParams: payments.ListParams{Limit: 10}, Types: tc.types})
		if err != nil {
			t.Fatal(err)
		}
		read := tuplesRead(t, db, "events") - before
		t.Logf("%s: %d rows read", tc.name, read)
		if len(p.Data) != tc.rows || p.HasMore != tc.more {
			t.Errorf("%s: got %d events (has_more %v), want %d (%v)", tc.name, len(p.Data), p.HasMore, tc.rows, tc.more)
		}
		// A page and the row after it, per type and partition at most.
		if read > 100 {
			t.Errorf("%s: the page read %d rows of events; want a page's worth, not the merchant's %d", tc.name, read, many)
		}
	}
}

// TestEventPagesKeepGenericPlans: every kind of events page — all types or
// some, first or after a cursor, with created bounds or without — is
// planned once per connection, not on every call (as it was with optional
// bounds as coalesce($n, …) and a LIMIT $n).
func TestEventPagesKeepGenericPlans(t *testing.T) {
	t.Parallel()
	db, store, sc := preparingMerchant(t)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `INSERT INTO events (id, merchant_id, livemode, type, data, created_at)
		SELECT 'evt_seed' || g, $1, g % 2 = 0, CASE WHEN g % 100 = 0 THEN 'charge.refunded' ELSE 'payment_intent.succeeded' END,
			'{}', now() - g * interval '90 seconds'
		FROM generate_series(1, 20000) g`, sc.MerchantID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `ANALYZE events`); err != nil {
		t.Fatal(err)
	}
	since := time.Now().Add(-48 * time.Hour).Unix()
	cursor := "evt_seed101" // a test event
	for _, f := range []payments.EventFilter{
		{},
		{ListParams: payments.ListParams{StartingAfter: cursor}},
		{CreatedGTE: &since},
		{Types: []string{payments.EventChargeRefunded}},
		{Types: []string{payments.EventPaymentSucceeded, payments.EventPaymentFailed}, ListParams: payments.ListParams{StartingAfter: cursor}},
	} {
		f.Limit = 10
		for range 12 {
			if _, err := store.EventPage(ctx, sc, f); err != nil {
				t.Fatal(err)
			}
		}
	}
	wantGenericPlans(t, db, `%FROM events e%ORDER BY e.created_at DESC, e.id DESC LIMIT 11%`, 5)
}

// wantGenericPlans checks the session's prepared statements like pattern:
// n of them, and each planned on its generic plan after its first five
// custom ones.
func wantGenericPlans(t *testing.T, db *sqlx.DB, pattern string, n int) {
	t.Helper()
	var plans []struct {
		Statement       string
		Generic, Custom int
	}
	if err := db.Select(&plans, `SELECT statement, generic_plans AS generic, custom_plans AS custom FROM pg_prepared_statements
		WHERE statement LIKE $1`, pattern); err != nil {
		t.Fatal(err)
	}
	if len(plans) != n {
		t.Errorf("got %d prepared statements like %s, want %d", len(plans), pattern, n)
	}
	for _, p := range plans {
		if p.Custom > 5 {
			t.Errorf("%d generic and %d custom plans; want the generic plan kept after 5 custom ones:\n%s", p.Generic, p.Custom, p.Statement)
		}
	}
}

// tuplesRead is how many rows of table (every partition) scans have
// returned so far, by the statistics of the pool's one session, flushed
// first.
func tuplesRead(t *testing.T, db *sqlx.DB, table string) int64 {
	t.Helper()
	// The session's counts reach the shared statistics when it next goes
	// idle, forced so by this call (it would wait up to a second).
	if _, err := db.Exec(`SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := db.Get(&n, `SELECT coalesce(sum(seq_tup_read + coalesce(idx_tup_fetch, 0)), 0)::bigint
		FROM pg_stat_user_tables WHERE relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = $1::regclass)`, table); err != nil {
		t.Fatal(err)
	}
	return n
}
