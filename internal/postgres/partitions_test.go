package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/testenv"
)

var freshDBs atomic.Int64

// freshDB creates a database of its own for the test (partition
// maintenance drops whole weeks, which the package's shared database must
// not see), migrated up to version (0: every migration), on the server
// itself.
func freshDB(t *testing.T, version int64) *sqlx.DB {
	t.Helper()
	u, err := url.Parse(testenv.DirectDatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := sqlx.Open("postgres", u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	// testenv drops paysvc_t_…_<pid> databases of processes that are gone.
	name := fmt.Sprintf("paysvc_t_part%d_%d", freshDBs.Add(1), os.Getpid())
	if _, err := admin.Exec(`CREATE DATABASE ` + name); err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	db, err := sqlx.Open("postgres", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Close()
		if a, err := sqlx.Open("postgres", testenv.DirectDatabaseURL(t)); err == nil {
			a.Exec(`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`) //nolint:errcheck // best effort
			a.Close()
		}
	})
	migrateTo(t, db, version)
	return db
}

// migrateTo applies the migrations up to version (0: every migration).
func migrateTo(t *testing.T, db *sqlx.DB, version int64) {
	t.Helper()
	p, err := postgres.Migrations(db.DB)
	if err != nil {
		t.Fatal(err)
	}
	if version == 0 {
		_, err = p.Up(context.Background())
	} else {
		_, err = p.UpTo(context.Background(), version)
	}
	if err != nil {
		t.Fatalf("migrate to %d: %v", version, err)
	}
}

// relations lists the database's tables (partitions included).
func relations(t *testing.T, db *sqlx.DB) []string {
	t.Helper()
	var names []string
	if err := db.Select(&names, `SELECT relname FROM pg_class WHERE relkind IN ('r', 'p') AND relnamespace = 'public'::regnamespace ORDER BY relname`); err != nil {
		t.Fatal(err)
	}
	return names
}

func week(t time.Time) string { return postgres.WeekStart(t).Format("20060102") }

// forever is a retention that drops nothing.
const forever = 100 * 365 * 24 * time.Hour

// holding opens a transaction that has run q and holds its locks until
// the test ends it (or the test's end rolls it back).
func holding(t *testing.T, db *sqlx.DB, q string, args ...any) *sqlx.Tx {
	t.Helper()
	tx, err := db.Beginx()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback() }) //nolint:errcheck // committed by the test, or rolled back here
	if _, err := tx.Exec(q, args...); err != nil {
		t.Fatal(err)
	}
	return tx
}

// readerOf holds a transaction that has read table: a slow reader.
func readerOf(t *testing.T, db *sqlx.DB, table string) *sqlx.Tx {
	t.Helper()
	return holding(t, db, `SELECT count(*) FROM `+table)
}

// seedExpiredWeek inserts an event (and its delivery) dated in a week that
// ended more than EventRetention before now, and runs maintenance once
// (dropping nothing) to give it its week partition; it returns the date.
func seedExpiredWeek(t *testing.T, db *sqlx.DB, store *postgres.Store, sc payments.Scope, we string, now time.Time) time.Time {
	t.Helper()
	expired := now.Add(-payments.EventRetention - 8*24*time.Hour)
	insertOldEvent(t, db, sc, we, expired, "succeeded")
	if _, err := store.MaintainPartitions(context.Background(), now, forever, forever); err != nil {
		t.Fatal(err)
	}
	return expired
}

// seedScope inserts a merchant and an enabled endpoint.
func seedScope(t *testing.T, db *sqlx.DB) (payments.Scope, string) {
	t.Helper()
	sc := payments.Scope{MerchantID: payments.NewID("mch_")}
	if _, err := db.Exec(`INSERT INTO merchants (id, name, plan) VALUES ($1, 'Partitions', 'free')`, sc.MerchantID); err != nil {
		t.Fatal(err)
	}
	we := payments.NewID("we_")
	if _, err := db.Exec(`INSERT INTO webhook_endpoints (id, merchant_id, livemode, url, events, status, secret_sealed)
		VALUES ($1, $2, false, 'https://hooks.example/in', '["*"]', 'enabled', '\x00')`, we, sc.MerchantID); err != nil {
		t.Fatal(err)
	}
	return sc, we
}

// TestMigrationKeepsEveryRow: rows written in the shape before 0016 (ids
// without time, events past, present and ahead on a sandbox clock,
// deliveries, attempts, Idempotency-Key records) are all there after it,
// column for column; the old ids are still found; seq goes on; and the
// first maintenance run gives the rows of the default partition their week.
func TestMigrationKeepsEveryRow(t *testing.T) {
	t.Parallel()
	db := freshDB(t, 15)
	sc, we := seedScope(t, db)
	now := time.Now().UTC()
	var eventIDs []string
	for i, created := range []time.Time{now.Add(-40 * 24 * time.Hour), now.Add(-3 * 24 * time.Hour), now, now.Add(60 * 24 * time.Hour)} {
		for j := range 3 {
			id := payments.NewID("evt_")
			eventIDs = append(eventIDs, id)
			if _, err := db.Exec(`INSERT INTO events (id, merchant_id, livemode, type, data, created_at) VALUES ($1, $2, false, 'charge.refunded', $3, $4)`,
				id, sc.MerchantID, fmt.Sprintf(`{"id": "re_%d_%d"}`, i, j), created.Add(time.Duration(j)*time.Second)); err != nil {
				t.Fatal(err)
			}
			d := payments.NewID("whd_") // no time: the ids of before
			status := []string{"pending", "succeeded", "failed"}[j]
			if _, err := db.Exec(`INSERT INTO webhook_deliveries (id, merchant_id, livemode, event_id, endpoint_id, status, next_attempt_at, created_at)
				VALUES ($1, $2, false, $3, $4, $5, $6, $6)`, d, sc.MerchantID, id, we, status, created); err != nil {
				t.Fatal(err)
			}
			for k := range j + 1 {
				if _, err := db.Exec(`INSERT INTO webhook_attempts (id, merchant_id, livemode, delivery_id, http_status, response_body, created_at)
					VALUES ($1, $2, false, $3, 500, 'nope', $4)`, payments.NewID("wha_"), sc.MerchantID, d, created.Add(time.Duration(k)*time.Minute)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for i, locked := range []time.Time{now.Add(-30 * time.Hour), now.Add(-time.Hour), now} {
		var status any = 200
		if i == 2 {
			status = nil
		}
		if _, err := db.Exec(`INSERT INTO idempotency_keys (merchant_id, livemode, key, request_hash, status, response, request_id, locked_at, expires_at)
			VALUES ($1, false, $2, '\x01', $3, '\x02', 'req_1', $4, $5)`, sc.MerchantID, fmt.Sprintf("key-%d", i), status, locked, locked.Add(24*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	// Every column of every row, in one text per table.
	digests := map[string]string{
		"events":             `SELECT count(*) || ':' || md5(string_agg(concat_ws('|', id, seq, merchant_id, livemode, type, data, created_at), ',' ORDER BY id)) FROM events`,
		"webhook_deliveries": `SELECT count(*) || ':' || md5(string_agg(concat_ws('|', id, merchant_id, livemode, event_id, endpoint_id, status, attempts, last_status, last_error, next_attempt_at, delivered_at, created_at), ',' ORDER BY id)) FROM webhook_deliveries`,
		"webhook_attempts":   `SELECT count(*) || ':' || md5(string_agg(concat_ws('|', id, merchant_id, livemode, delivery_id, http_status, response_body, error, created_at), ',' ORDER BY id)) FROM webhook_attempts`,
		"idempotency_keys":   `SELECT count(*) || ':' || md5(string_agg(concat_ws('|', merchant_id, livemode, key, request_hash, status, response, request_id, locked_at, expires_at), ',' ORDER BY key)) FROM idempotency_keys`,
	}
	digest := func() map[string]string {
		out := map[string]string{}
		for table, q := range digests {
			var d string
			if err := db.Get(&d, q); err != nil {
				t.Fatalf("digest %s: %v", table, err)
			}
			out[table] = d
		}
		return out
	}
	before := digest()
	for table, want := range map[string]string{"events": "12:", "webhook_deliveries": "12:", "webhook_attempts": "24:", "idempotency_keys": "3:"} {
		if !strings.HasPrefix(before[table], want) {
			t.Fatalf("seeded %s: got %s, want %s rows", table, before[table], want)
		}
	}
	var maxSeq int64
	if err := db.Get(&maxSeq, `SELECT max(seq) FROM events`); err != nil {
		t.Fatal(err)
	}

	if _, err := postgres.Migrate(context.Background(), db.DB); err != nil {
		t.Fatal(err)
	}
	if after := digest(); !maps(before, after) {
		t.Fatalf("after the migration: got %v, want %v", after, before)
	}
	var partitioned int
	if err := db.Get(&partitioned, `SELECT count(*) FROM pg_partitioned_table pt JOIN pg_class c ON c.oid = pt.partrelid
		WHERE c.relname IN ('events', 'webhook_deliveries', 'webhook_attempts', 'idempotency_keys')`); err != nil || partitioned != 4 {
		t.Fatalf("partitioned tables: got %d (%v), want 4", partitioned, err)
	}
	cut := week(now.AddDate(0, 0, 7))
	var inDefault, inBefore int
	if err := db.Get(&inDefault, `SELECT count(*) FROM events_default`); err != nil || inDefault != 3 {
		t.Errorf("events_default: got %d rows (%v), want the 3 dated ahead", inDefault, err)
	}
	if err := db.Get(&inBefore, `SELECT count(*) FROM events_before_`+cut); err != nil || inBefore != 9 {
		t.Errorf("events_before_%s: got %d rows (%v), want 9", cut, inBefore, err)
	}
	var eventAt time.Time
	if err := db.Get(&eventAt, `SELECT d.event_created_at FROM webhook_deliveries d JOIN events e ON e.id = d.event_id
		WHERE d.event_created_at <> e.created_at LIMIT 1`); err == nil {
		t.Errorf("a delivery's event_created_at is not its event's created_at (%v)", eventAt)
	}

	store := postgres.New(db)
	bg := context.Background()
	for _, id := range eventIDs {
		if _, err := store.Event(bg, sc, id); err != nil {
			t.Errorf("Event(%s), an id from before: %v", id, err)
		}
	}
	pg, err := store.EventPage(bg, sc, payments.EventFilter{ListParams: payments.ListParams{Limit: 5}})
	if err != nil || len(pg.Data) != 5 || !pg.HasMore {
		t.Fatalf("EventPage: got %d events, more %v (%v), want 5 and more", len(pg.Data), pg.HasMore, err)
	}
	next, err := store.EventPage(bg, sc, payments.EventFilter{ListParams: payments.ListParams{Limit: 5, StartingAfter: pg.Data[4].ID}})
	if err != nil || len(next.Data) != 5 || next.Data[0].ID == pg.Data[4].ID {
		t.Fatalf("EventPage after %s: got %d events (%v), want the next 5", pg.Data[4].ID, len(next.Data), err)
	}
	if _, err := db.Exec(`INSERT INTO events (id, merchant_id, livemode, type, data) VALUES ('evt_new', $1, false, 'charge.refunded', '{}')`, sc.MerchantID); err != nil {
		t.Fatal(err)
	}
	var seq int64
	if err := db.Get(&seq, `SELECT seq FROM events WHERE id = 'evt_new'`); err != nil || seq <= maxSeq {
		t.Errorf("seq of a new event: got %d (%v), want more than %d", seq, err, maxSeq)
	}
	if _, err := db.Exec(`DELETE FROM events WHERE id = 'evt_new'`); err != nil {
		t.Fatal(err)
	}

	// The first maintenance run: weeks ahead created, the rows dated ahead
	// moved into their week, nothing dropped yet (the _before_ partition
	// ends tomorrow).
	ch, err := store.MaintainPartitions(bg, now, payments.EventRetention, payments.IdempotencyTTL)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Dropped) != 0 {
		t.Errorf("first run dropped %v, want nothing", ch.Dropped)
	}
	ahead := week(now.Add(60 * 24 * time.Hour))
	for _, want := range []string{"events_" + ahead, "webhook_deliveries_" + ahead, "webhook_attempts_" + ahead, "events_" + week(now.AddDate(0, 0, 7))} {
		if !slices.Contains(ch.Created, want) {
			t.Errorf("first run created %v, want %s among them", ch.Created, want)
		}
	}
	if slices.Contains(ch.Created, "events_"+week(now)) {
		t.Errorf("first run created events_%s, which the _before_ partition covers", week(now))
	}
	if after := digest(); !maps(before, after) {
		t.Fatalf("after the first maintenance run: got %v, want %v", after, before)
	}
	if err := db.Get(&inDefault, `SELECT count(*) FROM events_default`); err != nil || inDefault != 0 {
		t.Errorf("events_default after maintenance: got %d rows (%v), want 0", inDefault, err)
	}
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// insertOldEvent writes an event with one delivery of status (and an
// attempt), dated created, with timed ids as the store mints them.
func insertOldEvent(t *testing.T, db *sqlx.DB, sc payments.Scope, we string, created time.Time, status string) (evt, whd string) {
	t.Helper()
	evt, whd = payments.NewTimedID("evt_", created), payments.NewTimedID("whd_", created)
	if _, err := db.Exec(`INSERT INTO events (id, merchant_id, livemode, type, data, created_at) VALUES ($1, $2, false, 'charge.refunded', '{"id": "re_1"}', $3)`,
		evt, sc.MerchantID, created); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO webhook_deliveries (id, merchant_id, livemode, event_id, endpoint_id, status, next_attempt_at, created_at, event_created_at)
		VALUES ($1, $2, false, $3, $4, $5, $6, $6, $6)`, whd, sc.MerchantID, evt, we, status, created); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO webhook_attempts (id, merchant_id, livemode, delivery_id, http_status, created_at, event_created_at)
		VALUES ($1, $2, false, $3, 500, $4, $4)`, payments.NewID("wha_"), sc.MerchantID, whd, created); err != nil {
		t.Fatal(err)
	}
	return evt, whd
}

// TestPartitionMaintenance: partitions are created ahead (by two runs at
// once, as two schedulers would); expired weeks are dropped with their
// deliveries and attempts, except a week still owing a delivery (a resend
// of an old event lands in it) until that delivery ends; Idempotency-Key
// weeks go a TTL after they end; no other table loses a row or goes away.
func TestPartitionMaintenance(t *testing.T) {
	t.Parallel()
	db := freshDB(t, 0)
	store := postgres.New(db)
	bg := context.Background()
	now := time.Now().UTC()
	keep := payments.EventRetention

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = store.MaintainPartitions(bg, now, keep, payments.IdempotencyTTL)
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("two runs at once: %v, %v", errs[0], errs[1])
	}
	rels := relations(t, db)
	for i := 0; i <= postgres.PartitionsAhead; i++ {
		for _, table := range []string{"events", "webhook_deliveries", "webhook_attempts", "idempotency_keys"} {
			if name := table + "_" + week(now.AddDate(0, 0, i)); !slices.Contains(rels, name) {
				t.Errorf("after maintenance: no %s, want the weeks up to %d ahead", name, postgres.PartitionsAhead)
			}
		}
	}
	if slices.Contains(rels, "events_"+week(now.AddDate(0, 0, postgres.PartitionsAhead+7))) {
		t.Errorf("got a partition a week beyond %d days ahead", postgres.PartitionsAhead)
	}

	sc, we := seedScope(t, db)
	expired := now.Add(-keep - 8*24*time.Hour) // its week ended more than keep ago
	owed := now.Add(-keep - 16*24*time.Hour)   // as old, but a delivery stays pending
	recent := now.Add(-keep + 2*time.Hour)     // its week ends after keep
	goneEvt, goneWhd := insertOldEvent(t, db, sc, we, expired, "succeeded")
	owedEvt, owedWhd := insertOldEvent(t, db, sc, we, owed, "failed")
	recentEvt, _ := insertOldEvent(t, db, sc, we, recent, "succeeded")
	// A resend of the owed event: a pending delivery in the event's week.
	rd, err := store.ResendEvent(bg, sc, owedEvt, we, now, func(string, payments.Endpoint) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if at, ok := payments.IDTime(rd.ID); !ok || !at.Equal(owed.Truncate(time.Millisecond)) {
		t.Errorf("resent delivery %s: carries %v, want its event's time %v", rd.ID, at, owed)
	}
	// Idempotency-Key records: a week whose keys all expired, and today's.
	for _, k := range []struct {
		key     string
		created time.Time
	}{{"old", now.Add(-payments.IdempotencyTTL - 8*24*time.Hour)}, {"live", now}} {
		if _, err := db.Exec(`INSERT INTO idempotency_keys (merchant_id, livemode, key, request_hash, status, locked_at, expires_at, created_at)
			VALUES ($1, false, $2, '\x01', 200, $3, $4, $3)`, sc.MerchantID, k.key, k.created, k.created.Add(payments.IdempotencyTTL)); err != nil {
			t.Fatal(err)
		}
	}
	// Money rows dated as old as the dropped week stay: retention never
	// touches them.
	if _, err := db.Exec(`INSERT INTO ledger_entries (id, merchant_id, livemode, type, amount, currency, source_id, created_at)
		VALUES ('le_old', $1, false, 'payment', 1000, 'usd', 'pi_old', $2)`, sc.MerchantID, expired); err != nil {
		t.Fatal(err)
	}
	counts := func() map[string]int {
		out := map[string]int{}
		for _, table := range relations(t, db) {
			if strings.HasPrefix(table, "events") || strings.HasPrefix(table, "webhook_deliveries") || strings.HasPrefix(table, "webhook_attempts") || strings.HasPrefix(table, "idempotency_keys") {
				continue
			}
			var n int
			if err := db.Get(&n, `SELECT count(*) FROM `+table); err != nil {
				t.Fatal(err)
			}
			out[table] = n
		}
		return out
	}
	// A run that drops nothing gives the rows of the default partitions
	// (every week above was past or too far ahead) their weeks.
	if _, err := store.MaintainPartitions(bg, now, forever, forever); err != nil {
		t.Fatal(err)
	}
	others := counts()
	rels = relations(t, db)
	for _, name := range []string{"events_" + week(expired), "webhook_deliveries_" + week(owed), "idempotency_keys_" + week(now.Add(-payments.IdempotencyTTL-8*24*time.Hour))} {
		if !slices.Contains(rels, name) {
			t.Fatalf("after a run: no %s, want the weeks of the default partition's rows", name)
		}
	}
	var resentIn string
	if err := db.Get(&resentIn, `SELECT tableoid::regclass::text FROM webhook_deliveries WHERE id = $1`, rd.ID); err != nil || resentIn != "webhook_deliveries_"+week(owed) {
		t.Errorf("resent delivery: in %q (%v), want webhook_deliveries_%s", resentIn, err, week(owed))
	}

	ch, err := store.MaintainPartitions(bg, now, keep, payments.IdempotencyTTL)
	if err != nil {
		t.Fatal(err)
	}
	wantGone := []string{"events_" + week(expired), "webhook_attempts_" + week(expired), "webhook_deliveries_" + week(expired),
		"idempotency_keys_" + week(now.Add(-payments.IdempotencyTTL-8*24*time.Hour))}
	slices.Sort(wantGone)
	got := slices.Clone(ch.Dropped)
	slices.Sort(got)
	if !slices.Equal(got, wantGone) {
		t.Errorf("dropped %v, want %v", got, wantGone)
	}
	after := relations(t, db)
	var vanished []string
	for _, r := range rels {
		if !slices.Contains(after, r) {
			vanished = append(vanished, r)
		}
	}
	if !slices.Equal(vanished, wantGone) {
		t.Errorf("tables gone: got %v, want exactly %v", vanished, wantGone)
	}
	if got := counts(); !maps(strmap(got), strmap(others)) {
		t.Errorf("other tables' rows: got %v, want %v", got, others)
	}
	if _, err := store.Event(bg, sc, goneEvt); err == nil {
		t.Errorf("Event(%s) of a dropped week: found, want not found", goneEvt)
	}
	if _, err := store.DeliveryForSend(bg, sc, goneWhd); err == nil {
		t.Errorf("DeliveryForSend(%s) of a dropped week: found", goneWhd)
	}
	for _, id := range []string{owedEvt, recentEvt} {
		if _, err := store.Event(bg, sc, id); err != nil {
			t.Errorf("Event(%s): %v, want it kept", id, err)
		}
	}
	if d, err := store.DeliveryForSend(bg, sc, rd.ID); err != nil || d.Status != "pending" || d.EventID != owedEvt {
		t.Errorf("DeliveryForSend(%s): got %+v, %v, want the pending resend of %s", rd.ID, d, err, owedEvt)
	}
	if d, err := store.EndpointDelivery(bg, sc, we, owedWhd); err != nil || len(d.Log) != 1 {
		t.Errorf("EndpointDelivery(%s): got %+v, %v, want it with its attempt", owedWhd, d, err)
	}
	var keys []string
	if err := db.Select(&keys, `SELECT key FROM idempotency_keys WHERE merchant_id = $1`, sc.MerchantID); err != nil || !slices.Equal(keys, []string{"live"}) {
		t.Errorf("idempotency keys left: got %v (%v), want [live]", keys, err)
	}

	// The resend ends: the owed week goes at the next run.
	if err := store.FailDelivery(bg, payments.Delivery{ID: rd.ID, MerchantID: sc.MerchantID}, "test"); err != nil {
		t.Fatal(err)
	}
	ch, err = store.MaintainPartitions(bg, now, keep, payments.IdempotencyTTL)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ch.Dropped, "events_"+week(owed)) || len(ch.Dropped) != 3 {
		t.Errorf("after the resend failed: dropped %v, want the owed week's three partitions", ch.Dropped)
	}
	if _, err := store.Event(bg, sc, owedEvt); err == nil {
		t.Errorf("Event(%s) after its week was dropped: found", owedEvt)
	}
	if _, err := store.ResendEvent(bg, sc, owedEvt, we, now, func(string, payments.Endpoint) error { return nil }); err == nil {
		t.Errorf("resend of a dropped event: got no error, want not found")
	}
}

func strmap(m map[string]int) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// TestLookupByIDReadsOnePartition: a timed id's lookup is planned on its
// partition alone; an id from before the migration on every partition.
func TestLookupByIDReadsOnePartition(t *testing.T) {
	t.Parallel()
	db := freshDB(t, 0)
	store := postgres.New(db)
	bg := context.Background()
	now := time.Now().UTC()
	if _, err := store.MaintainPartitions(bg, now, payments.EventRetention, payments.IdempotencyTTL); err != nil {
		t.Fatal(err)
	}
	sc, we := seedScope(t, db)
	evt, whd := insertOldEvent(t, db, sc, we, now.Add(time.Hour), "pending")
	plan := func(q string, args ...any) string {
		t.Helper()
		var lines []string
		if err := db.Select(&lines, `EXPLAIN `+q, args...); err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	const eq = `SELECT id FROM events WHERE merchant_id = $1 AND livemode = false AND id = $2
		AND created_at >= coalesce($3::timestamptz, '-infinity') AND created_at < coalesce($4::timestamptz, 'infinity')`
	at, _ := payments.IDTime(evt)
	hi := at.Add(2 * time.Millisecond)
	p := plan(eq, sc.MerchantID, evt, at, hi)
	if n := strings.Count(p, " on events_"); n != 1 || !strings.Contains(p, "events_"+week(now.Add(time.Hour))) {
		t.Errorf("timed id: got plan\n%s\nwant one partition, events_%s", p, week(now.Add(time.Hour)))
	}
	if p := plan(eq, sc.MerchantID, "evt_legacy", nil, nil); strings.Count(p, " on events_") < 2 {
		t.Errorf("legacy id: got plan\n%s\nwant every partition", p)
	}
	// The store's own lookups find them.
	if _, err := store.Event(bg, sc, evt); err != nil {
		t.Error(err)
	}
	if d, err := store.DeliveryForSend(bg, sc, whd); err != nil || d.EventID != evt {
		t.Errorf("DeliveryForSend(%s): got %+v, %v", whd, d, err)
	}
}

// TestIdempotencyKeyAcrossPartitions: a key claimed just before a
// partition boundary (its record in last week's partition) is replayed just
// after it, not claimed again; once expired it is claimed afresh, in this
// week's partition.
func TestIdempotencyKeyAcrossPartitions(t *testing.T) {
	t.Parallel()
	db := freshDB(t, 0)
	store := postgres.New(db)
	bg := context.Background()
	midnight := postgres.WeekStart(time.Now()) // a partition boundary
	if _, err := store.MaintainPartitions(bg, midnight.Add(-48*time.Hour), payments.EventRetention, payments.IdempotencyTTL); err != nil {
		t.Fatal(err)
	}
	sc, _ := seedScope(t, db)
	claim := func(key string, at time.Time) *payments.StoredResponse {
		t.Helper()
		ctx, rec, err := store.BeginIdempotent(bg, sc, key, []byte("hash"), at, payments.IdempotencyTTL, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if rec != nil {
			return rec
		}
		if err := store.SaveIdempotent(ctx, sc, key, 201, []byte("first at "+at.String()), "req_1"); err != nil {
			t.Fatal(err)
		}
		if err := store.EndRequest(ctx, true); err != nil {
			t.Fatal(err)
		}
		return nil
	}
	if rec := claim("k", midnight.Add(-time.Hour)); rec != nil {
		t.Fatalf("first claim: got a record %+v", rec)
	}
	rec := claim("k", midnight.Add(time.Hour))
	if rec == nil || rec.Status != 201 || !strings.HasPrefix(string(rec.Body), "first at") {
		t.Fatalf("claim the next day within the TTL: got %+v, want the stored response", rec)
	}
	if rec := claim("k", midnight.Add(22*time.Hour)); rec == nil {
		t.Fatal("claim within the TTL: claimed again")
	}
	if rec := claim("k", midnight.Add(24*time.Hour)); rec != nil {
		t.Fatalf("claim after the TTL: got %+v, want a fresh claim", rec)
	}
	var where []string
	if err := db.Select(&where, `SELECT tableoid::regclass::text FROM idempotency_keys WHERE key = 'k' ORDER BY created_at`); err != nil {
		t.Fatal(err)
	}
	if len(where) != 2 || where[0] == where[1] {
		t.Errorf("records of the key: in %v, want two, in two partitions", where)
	}
}

// TestPartitionMaintenanceInPoolMode: maintenance runs in the tests' pool
// mode (through PgBouncer in transaction mode under make test-pooled, and
// its pool guard): every statement in a transaction, no session state.
func TestPartitionMaintenanceInPoolMode(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	store := postgres.New(db)
	// Its runs keep everything (forever): nothing of the shared database is dropped.
	now := time.Now().UTC()
	// A row in the default partition (dated where no week partition is),
	// which the run moves into its week through a temporary table.
	sc, we := seedScope(t, db)
	ahead := now.AddDate(1, 0, 0)
	evt, _ := insertOldEvent(t, db, sc, we, ahead, "pending")
	for range 2 {
		if _, err := store.MaintainPartitions(context.Background(), now, forever, forever); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.Get(&n, `SELECT count(*) FROM pg_class WHERE relname = $1`, "events_"+week(now.AddDate(0, 0, postgres.PartitionsAhead))); err != nil || n != 1 {
		t.Errorf("partition %d days ahead: got %d (%v), want it created", postgres.PartitionsAhead, n, err)
	}
	var in string
	if err := db.Get(&in, `SELECT tableoid::regclass::text FROM events WHERE id = $1`, evt); err != nil || in != "events_"+week(ahead) {
		t.Errorf("event dated a year ahead: in %q (%v), want moved into events_%s", in, err, week(ahead))
	}
	if _, err := store.Event(context.Background(), sc, evt); err != nil {
		t.Errorf("Event(%s) after the move: %v", evt, err)
	}
}

// TestPartitionMoveKeepsConcurrentWrites: while maintenance copies rows
// out of a default partition into their week's table, a worker keeps
// updating one of them, as delivery attempts do: every UPDATE finds its row,
// and the row ends with every increment. (Without the carry-over under the
// table's lock, the copy taken before the last updates would be attached.)
func TestPartitionMoveKeepsConcurrentWrites(t *testing.T) {
	t.Parallel()
	db := freshDB(t, 0)
	store := postgres.New(db)
	bg := context.Background()
	now := time.Now().UTC()
	sc, we := seedScope(t, db)
	for i := range 5 {
		// A week of its own each round, a year or more ahead: in the default partition.
		created := now.AddDate(1, 0, 7*i)
		_, whd := insertOldEvent(t, db, sc, we, created, "pending")
		// Rows beside it, so that the updates go on while the week is copied
		// (and must be carried over after).
		if _, err := db.Exec(`INSERT INTO webhook_deliveries (id, merchant_id, livemode, event_id, endpoint_id, status, next_attempt_at, event_created_at)
			SELECT 'whd_fill_' || g, $1, false, 'evt_fill', $2, 'succeeded', $3, $3 FROM generate_series(1, 20000) g`, sc.MerchantID, we, created); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var applied, missed atomic.Int64
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := db.Exec(`UPDATE webhook_deliveries SET attempts = attempts + 1 WHERE id = $1 AND event_created_at = $2`, whd, created)
				if err != nil {
					t.Errorf("update: %v", err)
					return
				}
				if n, _ := res.RowsAffected(); n == 1 {
					applied.Add(1)
				} else {
					missed.Add(1)
				}
			}
		}()
		time.Sleep(20 * time.Millisecond)
		var in string
		for try := 0; try < 20; try++ { // a run that cannot take its lock in time skips the step
			if _, err := store.MaintainPartitions(bg, now, forever, forever); err != nil {
				t.Logf("maintenance: %v", err)
			}
			if err := db.Get(&in, `SELECT tableoid::regclass::text FROM webhook_deliveries WHERE id = $1`, whd); err != nil {
				t.Fatal(err)
			}
			if in != "webhook_deliveries_default" {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		close(stop)
		wg.Wait()
		if in != "webhook_deliveries_"+week(created) {
			t.Fatalf("round %d: delivery in %s, want moved into its week", i, in)
		}
		var attempts int64
		if err := db.Get(&attempts, `SELECT attempts FROM webhook_deliveries WHERE id = $1`, whd); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.Get(&n, `SELECT count(*) FROM `+"webhook_deliveries_"+week(created)); err != nil || n != 20001 {
			t.Errorf("round %d: webhook_deliveries_%s holds %d rows (%v), want 20001", i, week(created), n, err)
		}
		if missed.Load() != 0 || attempts != applied.Load() {
			t.Errorf("round %d: %d updates found no row; attempts %d, want the %d applied", i, missed.Load(), attempts, applied.Load())
		}
	}
}

// TestPartitionCreationWaitsForWriters: a row of a week that has no
// partition yet, written into the default partition while maintenance
// creates that week's partition, is moved into it, not a failed run. The
// writer's transaction is open when maintenance starts and commits while
// maintenance waits for it: looking for the week's rows before taking the
// lock found none, and the CREATE then failed on the committed row ("updated
// partition constraint for default partition would be violated").
func TestPartitionCreationWaitsForWriters(t *testing.T) {
	t.Parallel()
	// A database of its own: its run holds the maintenance lock (an advisory
	// lock, per database) while it waits, and on a shared database the other
	// tests' runs would return at once, having done nothing; and a second
	// run of the test (-count) would find the week made by the first.
	db := freshDB(t, 0)
	store := postgres.New(db)
	// Years ahead: a week no run has made.
	at := time.Now().UTC().AddDate(9, 0, 0)
	var n int
	if err := db.Get(&n, `SELECT count(*) FROM pg_class WHERE relname = $1`, "idempotency_keys_"+week(at)); err != nil || n != 0 {
		t.Fatalf("partition idempotency_keys_%s before the run: got %d (%v), want none", week(at), n, err)
	}
	mid := payments.NewID("mch_")
	tx, err := db.Beginx()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.Exec(`INSERT INTO idempotency_keys (merchant_id, livemode, key, request_hash, expires_at, created_at)
		VALUES ($1, false, 'written during maintenance', '\x00', $2, $2)`, mid, at); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := store.MaintainPartitions(context.Background(), at, forever, forever)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("maintenance returned (%v) while a writer of idempotency_keys was open, want it to wait", err)
	case <-time.After(500 * time.Millisecond):
	}
	endAndAwait(t, tx, done, "maintenance")
	var in string
	if err := db.Get(&in, `SELECT tableoid::regclass::text FROM idempotency_keys WHERE merchant_id = $1`, mid); err != nil || in != "idempotency_keys_"+week(at) {
		t.Errorf("the row written during maintenance: in %q (%v), want idempotency_keys_%s", in, err, week(at))
	}
}

// TestPartitionCreationWaitsForAnotherRun: a run that finds the maintenance
// lock held (another run in one of its steps) waits and creates every
// table's weeks, instead of skipping the tables the other run held the lock
// for at that moment — the other run may be past them already.
func TestPartitionCreationWaitsForAnotherRun(t *testing.T) {
	t.Parallel()
	db := freshDB(t, 0)
	store := postgres.New(db)
	now := time.Now().UTC()

	other, err := db.Beginx() // the other run, in a step of its own
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback() //nolint:errcheck // committed below
	if _, err := other.Exec(`SELECT pg_advisory_xact_lock($1::bigint)`, int64(0x7061727469)); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := store.MaintainPartitions(context.Background(), now, payments.EventRetention, payments.IdempotencyTTL)
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	endAndAwait(t, other, done, "MaintainPartitions")
	rels := relations(t, db)
	for _, table := range []string{"events", "webhook_deliveries", "webhook_attempts", "idempotency_keys"} {
		if name := table + "_" + week(now); !slices.Contains(rels, name) {
			t.Errorf("no %s after a run that found the lock held, want this week's partition", name)
		}
	}
}

// statementSeen tells whether a session of db's database is in a statement
// that cond (a condition on pg_stat_activity) picks.
func statementSeen(t *testing.T, db *sqlx.DB, cond string) bool {
	t.Helper()
	var n int
	if err := db.Get(&n, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND `+cond); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// waitForStatement waits until statementSeen(cond), failing the test if
// the maintenance run (done) returns first.
func waitForStatement(t *testing.T, db *sqlx.DB, done <-chan error, what, cond string) {
	t.Helper()
	for !statementSeen(t, db, cond) {
		select {
		case err := <-done:
			t.Fatalf("maintenance returned (%v) before %s was seen", err, what)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// TestPartitionMoveDoesNotHoldWriters: while maintenance copies a week's
// rows out of the default partition, a write to the table (here a new event
// of this week, itself in the default partition: no week partition exists
// yet) commits at once instead of waiting for the move, and lands in its
// week with every row copied.
func TestPartitionMoveDoesNotHoldWriters(t *testing.T) {
	t.Parallel()
	db := freshDB(t, 0)
	store := postgres.New(db)
	now := time.Now().UTC()
	sc, _ := seedScope(t, db)
	ahead := postgres.WeekStart(now.AddDate(1, 0, 0))
	const rows = 100000 // a copy of a second or more
	if _, err := db.Exec(`INSERT INTO events (id, merchant_id, livemode, type, data, created_at)
		SELECT 'evt_fill_' || g, $1, false, 'charge.refunded', '{"id": "re_1"}', $2::timestamptz + g * interval '1 second'
		FROM generate_series(1, $3::int) g`, sc.MerchantID, ahead, rows); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := store.MaintainPartitions(context.Background(), now, 100*365*24*time.Hour, payments.IdempotencyTTL)
		done <- err
	}()
	const copying = `state = 'active' AND query LIKE 'INSERT INTO "events_%" (%) SELECT % FROM "events_default"%'`
	waitForStatement(t, db, done, "its copy", copying)
	// Under the old move (the rows moved under the table's lock), this
	// write waited for the whole move: lock_timeout refuses that.
	evt := payments.NewTimedID("evt_", now)
	tx, err := db.Beginx()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // committed below
	if _, err := tx.Exec(`SET LOCAL lock_timeout = '1s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO events (id, merchant_id, livemode, type, data, created_at) VALUES ($1, $2, false, 'charge.refunded', '{"id": "re_2"}', $3)`,
		evt, sc.MerchantID, now); err != nil {
		t.Fatalf("write during the copy: %v, want it done at once", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if !statementSeen(t, db, copying) {
		t.Log("the copy ended before the write committed; the write still did not wait for a lock")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("MaintainPartitions: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("MaintainPartitions still running after 2 minutes")
	}
	var in string
	if err := db.Get(&in, `SELECT tableoid::regclass::text FROM events WHERE id = $1`, evt); err != nil || in != "events_"+week(now) {
		t.Errorf("event written during the copy: in %q (%v), want events_%s", in, err, week(now))
	}
	var n int
	if err := db.Get(&n, `SELECT count(*) FROM events_`+week(ahead)); err != nil || n != rows {
		t.Errorf("events_%s: %d rows (%v), want %d", week(ahead), n, err, rows)
	}
	if err := db.Get(&n, `SELECT count(*) FROM events_default`); err != nil || n != 0 {
		t.Errorf("events_default: %d rows (%v), want none left", n, err)
	}
	if left := detached(t, db); len(left) != 0 {
		t.Errorf("the replaced default partition is still there: %v", left)
	}
	if _, err := store.Event(context.Background(), sc, evt); err != nil {
		t.Errorf("Event(%s) after the move: %v", evt, err)
	}
}

// TestPartitionMoveCarriesSubtransactionWrites: a writer that updated a row
// of the default partition inside a savepoint before the move's snapshot,
// and commits while the move waits for the table's lock, has its update in
// the week the row is moved to. (A savepoint's write carries its
// subtransaction's id, which a pg_snapshot does not list among the
// transactions in progress: a visibility test against the snapshot took the
// copy made before the commit for current.)
func TestPartitionMoveCarriesSubtransactionWrites(t *testing.T) {
	t.Parallel()
	db := freshDB(t, 0)
	store := postgres.New(db)
	now := time.Now().UTC()
	sc, we := seedScope(t, db)
	created := now.AddDate(1, 0, 0)
	_, whd := insertOldEvent(t, db, sc, we, created, "pending")

	w, err := db.Beginx()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Rollback() //nolint:errcheck // committed below
	for _, q := range []string{`SAVEPOINT s`, `UPDATE webhook_deliveries SET attempts = 7 WHERE id = '` + whd + `'`, `RELEASE SAVEPOINT s`} {
		if _, err := w.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := store.MaintainPartitions(context.Background(), now, 100*365*24*time.Hour, payments.IdempotencyTTL)
		done <- err
	}()
	// The move of webhook_deliveries has copied and waits for the writer.
	waitForStatement(t, db, done, "waiting for the writer",
		`wait_event_type = 'Lock' AND query LIKE 'LOCK TABLE "webhook_deliveries" IN EXCLUSIVE MODE%'`)
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("MaintainPartitions: %v", err)
	}
	var got struct {
		In       string `db:"part"`
		Attempts int    `db:"attempts"`
	}
	if err := db.Get(&got, `SELECT tableoid::regclass::text AS part, attempts FROM webhook_deliveries WHERE id = $1`, whd); err != nil {
		t.Fatal(err)
	}
	if got.In != "webhook_deliveries_"+week(created) || got.Attempts != 7 {
		t.Errorf("delivery after the move: in %s with %d attempts, want webhook_deliveries_%s with the writer's 7", got.In, got.Attempts, week(created))
	}
}

// TestPartitionMoveCapsWeeksPerRun: a default partition with rows of more
// weeks than one run creates (a sandbox clock moved years ahead) gives the
// first ones their weeks, keeps the rest in the new default partition with
// their seq, and the next run moves those.
func TestPartitionMoveCapsWeeksPerRun(t *testing.T) {
	t.Parallel()
	db := freshDB(t, 0)
	store := postgres.New(db)
	now := time.Now().UTC()
	sc, _ := seedScope(t, db)
	const weeks = 110
	start := postgres.WeekStart(now.AddDate(1, 0, 0))
	if _, err := db.Exec(`INSERT INTO events (id, merchant_id, livemode, type, data, created_at)
		SELECT 'evt_w' || g, $1, false, 'charge.refunded', '{}', $2::timestamptz + g * interval '7 days'
		FROM generate_series(0, $3::int - 1) g`, sc.MerchantID, start, weeks); err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	if err := db.Select(&seqs, `SELECT seq FROM events ORDER BY seq`); err != nil {
		t.Fatal(err)
	}
	inDefault := func() int {
		var n int
		if err := db.Get(&n, `SELECT count(*) FROM events_default`); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := store.MaintainPartitions(context.Background(), now, forever, forever); err != nil {
		t.Fatal(err)
	}
	// This week and the next, then 98 of the rows' weeks.
	if n := inDefault(); n != weeks-98 {
		t.Errorf("after one run: %d rows in events_default, want the %d beyond the run's weeks", n, weeks-98)
	}
	var after []int64
	if err := db.Select(&after, `SELECT seq FROM events ORDER BY seq`); err != nil || !slices.Equal(after, seqs) {
		t.Errorf("events' seq after one run: %v (%v), want %v", after, err, seqs)
	}
	if _, err := store.MaintainPartitions(context.Background(), now, forever, forever); err != nil {
		t.Fatal(err)
	}
	if n := inDefault(); n != 0 {
		t.Errorf("after two runs: %d rows in events_default, want none", n)
	}
	if err := db.Select(&after, `SELECT seq FROM events ORDER BY seq`); err != nil || !slices.Equal(after, seqs) {
		t.Errorf("events' seq after two runs: %v (%v), want %v", after, err, seqs)
	}
	var last string
	if err := db.Get(&last, `SELECT tableoid::regclass::text FROM events WHERE id = $1`, fmt.Sprintf("evt_w%d", weeks-1)); err != nil || last != "events_"+week(start.AddDate(0, 0, 7*(weeks-1))) {
		t.Errorf("the last week's event: in %q (%v), want its week", last, err)
	}
}

// detached lists the tables detached from a partitioned table and not
// dropped yet.
func detached(t *testing.T, db *sqlx.DB) []string {
	t.Helper()
	var names []string
	for _, r := range relations(t, db) {
		if strings.Contains(r, "_detached_") {
			names = append(names, r)
		}
	}
	return names
}

// TestPartitionMaintenanceLeavesMerchantsOpen: while a transaction holds
// a merchant's row and an endpoint's as a foreign key's check does (FOR
// KEY SHARE, as every write of an event, a delivery or a product does
// until its commit), a move of the default partition's rows and a
// retention drop both finish: neither needs ACCESS EXCLUSIVE on merchants
// or webhook_endpoints. (Attaching week tables that had foreign keys of
// their own, and dropping a detached partition in the DETACH's
// transaction, both took it: lock_timeout ended the run.) What only a
// DROP of a detached table can do, with the table already emptied, waits
// for the next run after that transaction.
func TestPartitionMaintenanceLeavesMerchantsOpen(t *testing.T) {
	t.Parallel()
	db := freshDB(t, 0)
	store := postgres.New(db)
	bg := context.Background()
	now := time.Now().UTC()
	sc, we := seedScope(t, db)
	ahead := postgres.WeekStart(now.AddDate(1, 0, 0))
	expired := now.Add(-payments.EventRetention - 8*24*time.Hour)
	oldEvt, _ := insertOldEvent(t, db, sc, we, expired, "succeeded")
	if _, err := db.Exec(`INSERT INTO events (id, merchant_id, livemode, type, data, created_at)
		SELECT 'evt_fill_' || g, $1, false, 'charge.refunded', '{}', $2::timestamptz + g * interval '1 second'
		FROM generate_series(1, 1000) g`, sc.MerchantID, ahead); err != nil {
		t.Fatal(err)
	}

	holder, err := db.Beginx()
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback() //nolint:errcheck // committed below
	if _, err := holder.Exec(`SELECT 1 FROM merchants WHERE id = $1 FOR KEY SHARE`, sc.MerchantID); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(`SELECT 1 FROM webhook_endpoints WHERE id = $1 FOR KEY SHARE`, we); err != nil {
		t.Fatal(err)
	}

	if _, err := store.MaintainPartitions(bg, now, forever, forever); err != nil {
		t.Fatalf("move with a merchant's row held: %v", err)
	}
	var n int
	if err := db.Get(&n, `SELECT count(*) FROM events_`+week(ahead)); err != nil || n != 1000 {
		t.Errorf("events_%s: %d rows (%v), want 1000", week(ahead), n, err)
	}
	ch, err := store.MaintainPartitions(bg, now, payments.EventRetention, payments.IdempotencyTTL)
	if err != nil {
		t.Fatalf("retention with a merchant's row held: %v", err)
	}
	if !slices.Contains(ch.Dropped, "events_"+week(expired)) {
		t.Errorf("dropped %v, want events_%s", ch.Dropped, week(expired))
	}
	if _, err := store.Event(bg, sc, oldEvt); err == nil {
		t.Errorf("Event(%s) of an expired week: found", oldEvt)
	}
	left := detached(t, db)
	if len(left) == 0 {
		t.Error("no detached table left while the row was held: the DROP took ACCESS EXCLUSIVE on merchants anyway?")
	}
	for _, name := range left {
		if err := db.Get(&n, `SELECT count(*) FROM `+name); err != nil || n != 0 {
			t.Errorf("%s: %d rows (%v), want it emptied before its drop", name, n, err)
		}
	}

	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := store.MaintainPartitions(bg, now, payments.EventRetention, payments.IdempotencyTTL); err != nil {
		t.Fatal(err)
	}
	if left := detached(t, db); len(left) != 0 {
		t.Errorf("after the holder committed, a run left %v", left)
	}
}

// TestPartitionedIndexAfterASwap: an index migration (0018, 0019) that
// listed the default partition before a move replaced it finds the new
// default partition indexed already (a partition is created with every
// index of the parent) and leaves it, instead of building a second index
// whose ATTACH fails the migration.
func TestPartitionedIndexAfterASwap(t *testing.T) {
	t.Parallel()
	db := freshDB(t, 17)
	const def = "(merchant_id, livemode, type, created_at DESC, id DESC)"
	// 0018's first step, then a move's swap of the default partition.
	for _, q := range []string{
		`CREATE INDEX events_type ON ONLY events ` + def,
		`ALTER TABLE events DETACH PARTITION events_default`,
		`ALTER TABLE events_default RENAME TO events_default_detached_1`,
		`CREATE TABLE events_default PARTITION OF events DEFAULT`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// 0018 goes on with the list it read before the swap.
	if err := postgres.IndexPartition(context.Background(), db.DB, "events", "events_type", def, "events_default"); err != nil {
		t.Fatalf("index the default partition that replaced the listed one: %v", err)
	}
	var defs []string
	if err := db.Select(&defs, `SELECT pg_get_indexdef(indexrelid) FROM pg_index
		WHERE indrelid = 'events_default'::regclass AND pg_get_indexdef(indexrelid) LIKE '%(merchant_id, livemode, type, created_at DESC, id DESC)'`); err != nil {
		t.Fatal(err)
	}
	if len(defs) != 1 {
		t.Errorf("events_default's indexes on the type: %v, want one", defs)
	}
	migrateTo(t, db, 0)
	var valid bool
	if err := db.Get(&valid, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'events_type'::regclass`); err != nil || !valid {
		t.Errorf("events_type after the migrations: valid %v (%v), want valid", valid, err)
	}
}

// TestPartitionMoveByColumnName: a default partition whose columns are in
// another order than its table's (one attached from a table built apart)
// has its rows moved column for column.
func TestPartitionMoveByColumnName(t *testing.T) {
	t.Parallel()
	db := freshDB(t, 0)
	store := postgres.New(db)
	var cols string
	if err := db.Get(&cols, `SELECT string_agg(quote_ident(attname) || ' ' || format_type(atttypid, atttypmod)
		|| CASE WHEN attnotnull THEN ' NOT NULL' ELSE '' END, ', ' ORDER BY attnum DESC)
		FROM pg_attribute WHERE attrelid = 'idempotency_keys'::regclass AND attnum > 0 AND NOT attisdropped`); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`ALTER TABLE idempotency_keys DETACH PARTITION idempotency_keys_default`,
		`DROP TABLE idempotency_keys_default`,
		`CREATE TABLE idempotency_keys_default (` + cols + `)`,
		`ALTER TABLE idempotency_keys ATTACH PARTITION idempotency_keys_default DEFAULT`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	sc, _ := seedScope(t, db)
	created := time.Now().UTC().AddDate(1, 0, 0).Truncate(time.Second)
	if _, err := db.Exec(`INSERT INTO idempotency_keys (merchant_id, livemode, key, request_hash, status, response, request_id, locked_at, expires_at, created_at)
		VALUES ($1, true, 'k1', '\x0102', 201, '\x7b7d', 'req_1', $2, $3, $2)`, sc.MerchantID, created, created.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := store.MaintainPartitions(context.Background(), time.Now().UTC(), forever, forever); err != nil {
		t.Fatal(err)
	}
	var got struct {
		In      string    `db:"part"`
		Live    bool      `db:"livemode"`
		Status  int       `db:"status"`
		ReqID   string    `db:"request_id"`
		Expires time.Time `db:"expires_at"`
	}
	if err := db.Get(&got, `SELECT tableoid::regclass::text AS part, livemode, status, request_id, expires_at FROM idempotency_keys WHERE key = 'k1'`); err != nil {
		t.Fatal(err)
	}
	if got.In != "idempotency_keys_"+week(created) || !got.Live || got.Status != 201 || got.ReqID != "req_1" || !got.Expires.Equal(created.Add(time.Hour)) {
		t.Errorf("the moved record: %+v, want it in idempotency_keys_%s as written", got, week(created))
	}
}

// TestPartitionedIndexRerunAfterASwap: a run of 0018 cut short after
// indexing every week, then a move that replaced the default partition
// (indexed by its creation, which does not make the parent valid), then
// a run of 0018 again: the parent index ends valid, and an unattached
// index an earlier run built on the default partition is dropped.
func TestPartitionedIndexRerunAfterASwap(t *testing.T) {
	t.Parallel()
	db := freshDB(t, 17)
	store := postgres.New(db)
	ctx := context.Background()
	now := time.Now().UTC()
	sc, _ := seedScope(t, db)
	if _, err := store.MaintainPartitions(ctx, now, payments.EventRetention, payments.IdempotencyTTL); err != nil {
		t.Fatal(err)
	}
	const def = "(merchant_id, livemode, type, created_at DESC, id DESC)"
	if _, err := db.Exec(`CREATE INDEX events_type ON ONLY events ` + def); err != nil {
		t.Fatal(err)
	}
	var weeks []string
	if err := db.Select(&weeks, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'events'::regclass AND c.relname <> 'events_default'`); err != nil || len(weeks) == 0 {
		t.Fatalf("week partitions: %v (%v)", weeks, err)
	}
	for _, w := range weeks {
		if err := postgres.IndexPartition(ctx, db.DB, "events", "events_type", def, w); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`INSERT INTO events (id, merchant_id, livemode, type, data, created_at) VALUES ('evt_ahead', $1, false, 'charge.refunded', '{}', $2)`,
		sc.MerchantID, now.AddDate(1, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := store.MaintainPartitions(ctx, now, forever, forever); err != nil {
		t.Fatal(err)
	}
	// What the earlier code left when its ATTACH was refused.
	if _, err := db.Exec(`CREATE INDEX events_default_type ON events_default ` + def); err != nil {
		t.Fatal(err)
	}
	migrateTo(t, db, 0)
	var valid bool
	if err := db.Get(&valid, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'events_type'::regclass`); err != nil || !valid {
		t.Errorf("events_type after the rerun: valid %v (%v), want valid", valid, err)
	}
	var n int
	if err := db.Get(&n, `SELECT count(*) FROM pg_class WHERE relname = 'events_default_type'`); err != nil || n != 0 {
		t.Errorf("the duplicate index events_default_type: %d (%v), want it dropped", n, err)
	}
}

// TestPartitionMaintenanceDropsLeftovers: a run drops what earlier runs
// detached and left (a <table>_moved of the versions before detachedName,
// with its rows and its own foreign key), also when the run fails; and the
// drop's last step never drops a table that still has rows (its TRUNCATE
// skipped while another run held the lock): the commit would remove the
// files while holding merchants.
func TestPartitionMaintenanceDropsLeftovers(t *testing.T) {
	t.Parallel()
	db := freshDB(t, 0)
	store := postgres.New(db)
	sc, we := seedScope(t, db)
	now := time.Now().UTC()
	seedExpiredWeek(t, db, store, sc, we, now) // to expire below
	for _, table := range []string{"events_moved", "events_20200106_detached_1"} {
		for _, q := range []string{
			`CREATE TABLE ` + table + ` (LIKE events INCLUDING DEFAULTS)`,
			`ALTER TABLE ` + table + ` ADD FOREIGN KEY (merchant_id) REFERENCES merchants (id)`,
			`INSERT INTO ` + table + ` (id, seq, merchant_id, livemode, type, data, created_at) VALUES ('evt_old', 1, '` + sc.MerchantID + `', false, 'charge.refunded', '{}', '2020-01-07')`,
		} {
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	if err := store.DropEmptied(context.Background(), "events_20200106_detached_1"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.Get(&n, `SELECT count(*) FROM events_20200106_detached_1`); err != nil || n != 1 {
		t.Fatalf("a detached table with its row, after its last step alone: %d rows (%v), want it left with its row", n, err)
	}
	// A run whose retention fails (a slow reader holds events through
	// every try of its lock) still drops them.
	readerOf(t, db, "events")
	if _, err := store.MaintainPartitions(context.Background(), now, payments.EventRetention, payments.IdempotencyTTL); err == nil {
		t.Fatal("retention with a reader holding events throughout: no error, want its lock's tries to run out")
	}
	rels := relations(t, db)
	for _, table := range []string{"events_moved", "events_20200106_detached_1"} {
		if slices.Contains(rels, table) {
			t.Errorf("after a failed run: %s is still there", table)
		}
	}
}

// TestPartitionDropLetsQueriesThrough: while retention waits to detach
// the week's partitions, for a slow transaction that read events or for
// one that updated an endpoint (a DETACH of webhook_deliveries' partition
// takes a lock on webhook_endpoints, whose rows its keys reference),
// another query of events, or of webhook_deliveries, waits at most one of
// its short tries (lockStep), not its whole wait: a query with a 300 ms
// lock_timeout gets through, and the week is dropped once the slow
// transaction ends. (With one wait of lock_timeout's second, the query
// queued behind the DETACH for the rest of that second; with each table's
// DETACH in turn, the one detached already held its table through the next
// one's tries; and the DETACH waited for the endpoint's update with its
// own second while holding all three tables.)
func TestPartitionDropLetsQueriesThrough(t *testing.T) {
	t.Parallel()
	for _, tc := range slowTransactions("events") {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := freshDB(t, 0)
			store := postgres.New(db)
			bg := context.Background()
			now := time.Now().UTC()
			sc, we := seedScope(t, db)
			expired := seedExpiredWeek(t, db, store, sc, we, now)

			slow := tc.slow(t, db, we)
			done := make(chan error, 1)
			go func() {
				_, err := store.MaintainPartitions(bg, now, payments.EventRetention, payments.IdempotencyTTL)
				done <- err
			}()
			waitForStatement(t, db, done, "retention waiting for a lock", maintenanceWaits)
			// Events, and a table whose partition of the week is detached in the
			// same transaction.
			for _, table := range []string{"events", "webhook_deliveries"} {
				if err := queryWithin300ms(db, `SELECT count(*) FROM `+table+` WHERE merchant_id = $1`, sc.MerchantID); err != nil {
					t.Fatalf("a query of %s while the DETACH waits: %v, want it through between the DETACH's tries", table, err)
				}
			}
			endAndAwait(t, slow, done, "retention")
			if rels := relations(t, db); slices.Contains(rels, "events_"+week(expired)) {
				t.Errorf("events_%s is still a table after retention", week(expired))
			}
		})
	}
}

// endAndAwait commits slow, a transaction that a maintenance run (done)
// waits for, and waits up to 30 s for the run, which must succeed.
func endAndAwait(t *testing.T, slow *sqlx.Tx, done <-chan error, what string) {
	t.Helper()
	if err := slow.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s after the transaction it waited for committed: %v", what, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s still running 30 s after the transaction it waited for committed", what)
	}
}

// maintenanceWaits finds the maintenance run waiting for a lock: the only
// statement of a test's database that can (its slow transaction is idle).
const maintenanceWaits = `wait_event_type = 'Lock'`

// slowTransaction is a transaction a maintenance run waits for: slow
// opens and holds it, given the scope's endpoint we.
type slowTransaction struct {
	name string
	slow func(t *testing.T, db *sqlx.DB, we string) *sqlx.Tx
}

// slowTransactions are the two kinds of transaction a maintenance step
// waits for: a reader of table, and an endpoint's update (whose table the
// keys reference).
func slowTransactions(table string) []slowTransaction {
	return []slowTransaction{
		{"a reader of " + table, func(t *testing.T, db *sqlx.DB, _ string) *sqlx.Tx { return readerOf(t, db, table) }},
		{"an endpoint's update", endpointUpdate},
	}
}

// endpointUpdate holds a transaction that has updated endpoint we, as a
// delivery's success does.
func endpointUpdate(t *testing.T, db *sqlx.DB, we string) *sqlx.Tx {
	t.Helper()
	return holding(t, db, `UPDATE webhook_endpoints SET url = url WHERE id = $1`, we)
}

// queryWithin300ms runs q in a transaction of its own that waits at most
// 300 ms for a lock.
func queryWithin300ms(db *sqlx.DB, q string, args ...any) error {
	tx, err := db.Beginx()
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // committed below
	if _, err := tx.Exec(`SELECT set_config('lock_timeout', '300ms', true)`); err != nil {
		return err
	}
	if _, err := tx.Exec(q, args...); err != nil {
		return err
	}
	return tx.Commit()
}

// TestPartitionCreationLetsQueriesThrough: the hourly creation of a week
// ahead attaches the week's table, which locks the default partition (to
// check it holds no row of the week; ACCESS EXCLUSIVE, so it waits for
// the table's readers) and adds the foreign keys' triggers on the
// referenced tables. While a slow transaction holds one of those (it read
// webhook_deliveries, or it updated an endpoint), another query of
// webhook_deliveries waits at most one of the creation's short tries, not
// lock_timeout's second, and the week is created once the slow
// transaction ends. (The ATTACH waited for it for that second, holding the
// default partition or asking for it, so every query of the table that
// reads it queued; then the run failed.)
func TestPartitionCreationLetsQueriesThrough(t *testing.T) {
	t.Parallel()
	for _, tc := range slowTransactions("webhook_deliveries") {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := freshDB(t, 0)
			store := postgres.New(db)
			now := time.Now().UTC()
			sc, we := seedScope(t, db)
			insertOldEvent(t, db, sc, we, now, "succeeded")
			if _, err := store.MaintainPartitions(context.Background(), now, forever, forever); err != nil {
				t.Fatal(err)
			}
			// Two weeks on, the next run has a week to create, and nothing in
			// the default partition.
			later := now.AddDate(0, 0, 14)

			slow := tc.slow(t, db, we)
			done := make(chan error, 1)
			go func() {
				_, err := store.MaintainPartitions(context.Background(), later, forever, forever)
				done <- err
			}()
			waitForStatement(t, db, done, "the creation waiting for a lock", maintenanceWaits)
			if err := queryWithin300ms(db, `SELECT count(*) FROM webhook_deliveries WHERE merchant_id = $1`, sc.MerchantID); err != nil {
				t.Fatalf("a query of webhook_deliveries while the creation waits: %v, want it through between the creation's tries", err)
			}
			endAndAwait(t, slow, done, "creation")
			if rels := relations(t, db); !slices.Contains(rels, "webhook_deliveries_"+week(later)) {
				t.Errorf("no webhook_deliveries_%s after the run", week(later))
			}
		})
	}
}
