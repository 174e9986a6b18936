package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lib/pq"

	"paysvc/internal/payments"
)

// Retention by partition (migrations/0016_partitions.sql). Events, webhook
// deliveries and their attempts, and Idempotency-Key records live in tables
// partitioned by range on a time, one partition per UTC week (Monday 00:00
// to Monday 00:00), named <table>_YYYYMMDD after its Monday. Besides those,
// <table>_before_YYYYMMDD holds everything before that day (the rows the
// migration moved), and <table>_default the rows no other partition takes
// (dated beyond the weeks created ahead, by a sandbox clock moved forward;
// or before the first week partition of a new database) until the next run
// gives their weeks partitions. MaintainPartitions, run hourly by the
// scheduler, creates the weeks ahead and drops the expired ones; rows are
// never deleted one by one. Nothing else is ever dropped: the names it
// touches are the partitions of these four tables, listed from the catalog,
// and a default partition it replaced (createPartitions).
//
// Why weeks, not days: a query that cannot be pruned (the first page of
// GET /v1/events) is planned over every partition, and its planning grows
// with their number: measured on the 2-core machine, 0.15 ms unpartitioned,
// 0.6 ms over 9 partitions, 0.8 ms over 17 (under load from other tests).
// With the 30-day default retention weeks keep about 7 partitions a table
// (days would keep about 40) and keep data at most a week beyond it.

// PartitionsAhead is how many days after today have their partitions
// created in advance: the scheduler may stop for that long before rows
// start landing in the default partitions (which still works, and the next
// run moves them out).
const PartitionsAhead = 7

// partitionSpan is the range of a partition: a week from a Monday.
const partitionSpan = 7

// WeekStart returns the Monday 00:00 UTC of t's week: the start of t's
// partition.
func WeekStart(t time.Time) time.Time {
	d := t.UTC().Truncate(24 * time.Hour)
	return d.AddDate(0, 0, -(int(d.Weekday())+6)%7)
}

// partitionLockTimeout bounds the wait of partition DDL for its table
// lock: DETACH and CREATE … PARTITION OF lock the table against every
// query, and a lock request queued behind a long query would queue the API
// behind it. A run that cannot lock within it fails and the next retries.
const partitionLockTimeout = "1s"

// partitionLockKey is the transaction-level advisory lock of partition
// maintenance, one step (a transaction) at a time. Of two runs at once (two
// schedulers, a retry beside a slow run, a sandbox clock's advance), a
// creation waits for the lock and then creates what the other left
// missing: skipping it instead, as every step did, could skip a table's
// creation while the other run held the lock for another table, and
// leave that table's weeks to the default partition until the next run
// (both runs had skipped webhook_deliveries). A drop that finds the lock
// held is skipped (pg_try_advisory_xact_lock): a drop put off to the next
// run loses nothing. Every step is idempotent.
const partitionLockKey = 0x7061727469 // "parti"

// eventTables are partitioned on their event's time and leave together,
// children first.
var eventTables = []string{"webhook_attempts", "webhook_deliveries", "events"}

// partitionColumn is each partitioned table's partition column.
var partitionColumn = map[string]string{
	"events":             "created_at",
	"webhook_deliveries": "event_created_at",
	"webhook_attempts":   "event_created_at",
	"idempotency_keys":   "created_at",
}

// idSpan returns the bounds, [lo, hi), of the partition time of the row a
// timed id names (payments.IDTime): the row's partition column is within
// them, so a lookup by id reads one partition with the condition
//
//	col >= coalesce($n::timestamptz, '-infinity') AND col < coalesce($n+1::timestamptz, 'infinity')
//
// Ids minted before ids carried their time give nil bounds: every partition.
func idSpan(id string) (lo, hi *time.Time) {
	t, ok := payments.IDTime(id)
	if !ok {
		return nil, nil
	}
	// The id carries the millisecond of a time PostgreSQL keeps to the
	// microsecond, rounded from Go's nanosecond: at most 1 ms after.
	h := t.Add(2 * time.Millisecond)
	return &t, &h
}

// partition is one partition of a table, as its name tells.
type partition struct {
	name  string
	day   time.Time // a week partition's Monday; zero for the others
	until time.Time // an upper bound: the end of the week, or a _before_ partition's bound
}

// partitions lists table's partitions (its default one aside).
func partitions(ctx context.Context, tx *txn, table string) ([]partition, error) {
	var names []string
	const q = `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
	WHERE i.inhparent = $1::regclass ORDER BY c.relname`
	if err := tx.SelectContext(ctx, &names, q, table); err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", table, err)
	}
	var out []partition
	for _, n := range names {
		rest, ok := strings.CutPrefix(n, table+"_")
		if !ok {
			continue
		}
		before := false
		if r, ok := strings.CutPrefix(rest, "before_"); ok {
			rest, before = r, true
		}
		d, err := time.Parse("20060102", rest)
		if err != nil {
			continue // the default partition
		}
		if before {
			out = append(out, partition{name: n, until: d})
		} else {
			out = append(out, partition{name: n, day: d, until: d.AddDate(0, 0, partitionSpan)})
		}
	}
	return out, nil
}

// MaintainPartitions creates the week partitions from now's week to the
// week PartitionsAhead days after now that do not exist yet, and those of
// the weeks of the rows in the default partitions (moving those rows into
// them), then drops the partitions entirely older than their retention
// (DETACH, then dropDetached): events, their deliveries and attempts when
// their week ended keepEvents before now — but not while the week still
// holds a pending delivery, which is still owed to an endpoint;
// Idempotency-Key records keepKeys after (when every record in them has
// expired). Each table's creations are one transaction, each week's
// detaches another, each under the maintenance advisory lock; a drop that
// finds the lock taken skips its work (another run is doing it).
func (s *Store) MaintainPartitions(ctx context.Context, now time.Time, keepEvents, keepKeys time.Duration) (payments.PartitionChanges, error) {
	ch, err := s.maintainPartitions(ctx, now, keepEvents, keepKeys)
	// What the moves and the drops detached, after their commits, and
	// what earlier runs left: also when a step failed, which may have left
	// a large default partition a move had replaced.
	return ch, errors.Join(err, s.dropDetached(ctx, false, partitionedTables))
}

// partitionedTables are the tables partitioned by week, in the order
// their partitions are created.
var partitionedTables = []string{"events", "webhook_deliveries", "webhook_attempts", "idempotency_keys"}

func (s *Store) maintainPartitions(ctx context.Context, now time.Time, keepEvents, keepKeys time.Duration) (payments.PartitionChanges, error) {
	var ch payments.PartitionChanges
	for _, table := range partitionedTables {
		created, err := s.createPartitions(ctx, table, WeekStart(now), WeekStart(now.AddDate(0, 0, PartitionsAhead)))
		ch.Created = append(ch.Created, created...)
		if err != nil {
			return ch, err
		}
	}
	dropped, err := s.dropExpired(ctx, eventTables, now.Add(-keepEvents))
	ch.Dropped = append(ch.Dropped, dropped...)
	if err != nil {
		return ch, err
	}
	dropped, err = s.dropExpired(ctx, []string{"idempotency_keys"}, now.Add(-keepKeys))
	ch.Dropped = append(ch.Dropped, dropped...)
	return ch, err
}

// maintenanceTx runs fn in a transaction holding the maintenance lock,
// with partitionLockTimeout for its statements. When another transaction
// holds the lock, it waits for it if wait is set (the wait is not bounded
// by partitionLockTimeout: the holder's statements are), else it does not
// run fn.
func (s *Store) maintenanceTx(ctx context.Context, wait bool, fn func(tx *txn) error) error {
	return s.inTx(ctx, func(tx *txn) error {
		tx.prep = nil // its statements are DDL named by the week: not worth keeping prepared
		locked := true
		if wait {
			if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1::bigint)`, partitionLockKey); err != nil {
				return fmt.Errorf("lock partition maintenance: %w", err)
			}
		} else if err := tx.GetContext(ctx, &locked, `SELECT pg_try_advisory_xact_lock($1::bigint)`, partitionLockKey); err != nil {
			return fmt.Errorf("lock partition maintenance: %w", err)
		}
		if !locked {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `SELECT set_config('lock_timeout', $1, true)`, partitionLockTimeout); err != nil {
			return fmt.Errorf("lock partition maintenance: %w", err)
		}
		return fn(tx)
	})
}

// createPartitions creates table's week partitions for the weeks from
// first to last (Mondays), and for the weeks of the rows in its default
// partition, that no partition covers yet, moving those rows into them.
//
// Every week is built as a table of its own and attached, so that the
// rows' copy does not hold the table's writers: a move of 2,000,000 rows
// as a DELETE and an INSERT under the table's lock held every write that
// makes an event for 2 min 20 s on the 2-core bench VM (results.md, "The
// renewal figure's stall"); this way they wait under a second per million
// rows ("The default partition's move without holding writers"). In one
// transaction:
//
//  1. Without a lock that writers wait for: find the transaction id from
//     which rows may be missing from a copy begun now (carryFrom), then
//     create each week's table (LIKE the parent: columns, CHECK
//     constraints, indexes; and a CHECK of the week's range, so that the
//     ATTACH need not scan it) and copy the default partition's rows of
//     that week into it. Writers go on meanwhile: into the default
//     partition, and updating the rows being copied. At most
//     maxWeeksPerRun weeks a run.
//  2. LOCK the parent IN EXCLUSIVE MODE: reads go on; it waits for the
//     writers in flight and holds later ones until commit, so what the
//     default partition holds from here on is final.
//  3. Carry over the rows written by that transaction or a later one:
//     the new and updated rows replace their copies (and some that did not
//     change, written by transactions that ended before the copy, are
//     copied again). A week of which only such rows exist gets its table
//     now, within the bound.
//  4. Count the default partition's rows.
//  5. Swap: first, in short tries (lockStep), the locks it needs on the
//     tables the keys reference and on the default partition; then DETACH
//     the default partition (renamed, and dropped after this
//     transaction by dropDetached), ATTACH the weeks' tables (no scan for
//     the range: their range CHECK proves it; their indexes are taken as
//     the parent's, and the parent's foreign keys are added and checked),
//     CREATE an empty default, and put back into it the rows of weeks
//     beyond the bound, if any. The DETACH takes ACCESS EXCLUSIVE: reads
//     wait too, for these catalog changes. When the default partition was
//     empty it stays, and each ATTACH finds nothing in it. Last, the rows
//     copied and put back must number as many as the default partition
//     held (no code deletes from these tables; a run that finds one
//     deleted fails and leaves everything as it was).
//
// Writers wait only for steps 3 to 5: a scan of the default partition, the
// foreign keys' checks and catalog changes. A row moved is never absent from
// the table: the copies are invisible to other transactions until commit,
// and the default partition's rows stay until then. The foreign keys are
// the ATTACH's to add, not the weeks' tables' own: attaching a table with
// keys of its own drops their triggers on the referenced tables, which
// takes ACCESS EXCLUSIVE on merchants and webhook_endpoints until commit,
// and so held every write of every table that references a merchant;
// the ATTACH's own take SHARE ROW EXCLUSIVE, which holds only writes to
// those two tables.
func (s *Store) createPartitions(ctx context.Context, table string, first, last time.Time) ([]string, error) {
	var created []string
	err := s.maintenanceTx(ctx, true, func(tx *txn) error {
		created = created[:0]
		parts, err := partitions(ctx, tx, table)
		if err != nil {
			return err
		}
		m := mover{tx: tx, table: table, col: partitionColumn[table], def: table + "_default"}
		// By name, not SELECT *: that relies on every table listing the
		// columns in one order.
		const cols = `SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute
		WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`
		if err := tx.GetContext(ctx, &m.cols, cols, table); err != nil {
			return fmt.Errorf("columns of %s: %w", table, err)
		}
		stray, err := m.weeks(ctx, pq.QuoteIdentifier(m.def))
		if err != nil {
			return err
		}
		var weeks []time.Time
		for d := first; !d.After(last); d = d.AddDate(0, 0, partitionSpan) {
			weeks = append(weeks, d)
		}
		for _, d := range stray {
			if !slices.ContainsFunc(weeks, d.Equal) {
				weeks = append(weeks, d)
			}
		}
		weeks = slices.DeleteFunc(weeks, func(d time.Time) bool {
			return slices.ContainsFunc(parts, func(p partition) bool {
				return p.day.Equal(d) || (p.day.IsZero() && !p.until.Before(d.AddDate(0, 0, partitionSpan)))
			})
		})
		if len(weeks) == 0 {
			return nil
		}
		// This week and the next first, then the rows' weeks in order.
		if len(weeks) > maxWeeksPerRun {
			weeks, m.capped = weeks[:maxWeeksPerRun], true
		}
		slices.SortFunc(weeks, time.Time.Compare)
		// Before the copy, not before the look for weeks: a row the look
		// missed is written after this point, and carried over to a week
		// of its own (carryOver). An hourly run with nothing to create does
		// not wait for the transactions in progress.
		from, err := carryFrom(ctx, tx) // step 3's
		if err != nil {
			return fmt.Errorf("snapshot %s: %w", table, err)
		}
		for _, d := range weeks { // step 1
			if err := m.stage(ctx, d, slices.ContainsFunc(stray, d.Equal)); err != nil {
				return err
			}
		}
		if err := lockForSwap(ctx, tx, table); err != nil { // step 2
			return err
		}
		if err := m.carryOver(ctx, from); err != nil { // step 3
			return err
		}
		if err := m.swap(ctx); err != nil { // steps 4 and 5
			return err
		}
		created = m.names()
		return nil
	})
	if err != nil {
		return created, err
	}
	return created, nil
}

// maxWeeksPerRun bounds the weeks one run creates for a table: each
// holds a score of locks until commit (its table, indexes, constraints),
// and a default partition with rows of hundreds of weeks (a sandbox clock
// moved years ahead) would exhaust the server's lock table. The rows of
// the weeks left over go back into the new default partition, and the
// next runs give them their weeks.
const maxWeeksPerRun = 100

// carryFromWait bounds carryFrom's wait for the transactions in progress.
const carryFromWait = 2 * time.Second

// carryFrom returns the id from which a transaction's rows may be missing
// from a copy of the default partition begun after it returns: every
// transaction with a lower id (subtransactions included) has ended by then.
// It is the current snapshot's xmax once the transactions it lists as in
// progress have ended, waiting up to carryFromWait for them (a request's
// transaction takes milliseconds); else the snapshot's xmin, which is as
// correct and carries over more rows (those of every transaction since
// the oldest one still running).
//
// Not "the rows not visible to the snapshot": a pg_snapshot lists the
// top-level transactions in progress, not their subtransactions, so a row
// written in a savepoint before the snapshot and committed during the copy
// looked visible to it, and its copy (the version before) was attached.
func carryFrom(ctx context.Context, tx *txn) (int64, error) {
	var snap struct {
		Snap string `db:"snap"`
		Xmin int64  `db:"xmin"`
		Xmax int64  `db:"xmax"`
	}
	const q = `SELECT s::text AS snap, pg_snapshot_xmin(s)::text::bigint AS xmin, pg_snapshot_xmax(s)::text::bigint AS xmax
	FROM pg_current_snapshot() s`
	if err := tx.GetContext(ctx, &snap, q); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(carryFromWait)
	for {
		var running int
		const rq = `SELECT count(*) FROM pg_snapshot_xip($1::pg_snapshot) x WHERE pg_xact_status(x) = 'in progress'`
		if err := tx.GetContext(ctx, &running, rq, snap.Snap); err != nil {
			return 0, err
		}
		if running == 0 {
			return snap.Xmax, nil
		}
		if time.Now().After(deadline) {
			return snap.Xmin, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// lockForSwap takes EXCLUSIVE on table: its writers wait for the swap
// from here on. Its lockStep tries add up to five seconds, for writers'
// transactions that hold the table long: a failure would throw the run's
// copy away.
func lockForSwap(ctx context.Context, tx *txn, table string) error {
	if err := lockStep(ctx, tx, 100, lockTables("EXCLUSIVE", table)); err != nil {
		return fmt.Errorf("lock %s to attach its weeks: %w", table, err)
	}
	return nil
}

// lockTryWait is how long one of lockStep's tries waits for its lock.
const lockTryWait = "50ms"

// lockStep runs qs, statements whose locks hold other transactions'
// queries of a table (LOCK, DETACH PARTITION), waiting for each lock at
// most lockTryWait at a time, under a savepoint, up to tries times: a try
// that times out gives back every lock its statements took. While a
// statement waits for its lock, every query of the table that arrives
// queues behind it: one wait of lock_timeout's second, behind a slow
// transaction, held them all that long, where short tries let them
// through in between.
func lockStep(ctx context.Context, tx *txn, tries int, qs ...string) error {
	if _, err := tx.ExecContext(ctx, `SELECT set_config('lock_timeout', $1, true)`, lockTryWait); err != nil {
		return err
	}
	// One savepoint for every try: ROLLBACK TO keeps it, and a savepoint
	// a try would open inside it stays open, a subtransaction, until the
	// commit (over 64 of them make every snapshot of the server slower).
	if _, err := tx.ExecContext(ctx, `SAVEPOINT partition_lock`); err != nil {
		return err
	}
	var err error
	for range tries {
		if err = execAll(ctx, tx, qs); err == nil {
			break
		}
		var pe *pq.Error
		if !errors.As(err, &pe) || pe.Code != "55P03" { // lock_not_available
			return err
		}
		if _, rerr := tx.ExecContext(ctx, `ROLLBACK TO SAVEPOINT partition_lock`); rerr != nil {
			return rerr
		}
	}
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `RELEASE SAVEPOINT partition_lock`); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `SELECT set_config('lock_timeout', $1, true)`, partitionLockTimeout)
	return err
}

// lockTables is the LOCK statement of tables (names, quoted here) in mode.
func lockTables(mode string, tables ...string) string {
	quoted := make([]string, len(tables))
	for i, t := range tables {
		quoted[i] = pq.QuoteIdentifier(t)
	}
	return `LOCK TABLE ` + strings.Join(quoted, ", ") + ` IN ` + mode + ` MODE`
}

func execAll(ctx context.Context, tx *txn, qs []string) error {
	for _, q := range qs {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// lockReferenced returns the LOCK statement for the tables that tables'
// foreign keys reference (merchants, webhook_endpoints), in SHARE ROW
// EXCLUSIVE mode: what a DETACH or ATTACH of their partitions (and a new
// default partition) takes on them to add or drop the keys' triggers.
// Taken in lockStep's tries beside the partitioned tables' own locks: else
// that statement waited up to lock_timeout's second for one in-flight
// update of an endpoint (every delivery's success makes one) or of a
// merchant, while holding the queries of the tables already locked; in a
// try it holds them at most lockTryWait more. None when nothing is
// referenced.
func lockReferenced(ctx context.Context, tx *txn, tables []string) ([]string, error) {
	var refs []string
	// Ordered, so that two runs take the locks in one order.
	const q = `SELECT DISTINCT c.relname FROM pg_constraint k JOIN pg_class c ON c.oid = k.confrelid
		WHERE k.contype = 'f' AND k.conrelid = ANY ($1::regclass[]) ORDER BY 1`
	if err := tx.SelectContext(ctx, &refs, q, pq.Array(tables)); err != nil {
		return nil, fmt.Errorf("tables referenced by %s: %w", strings.Join(tables, ", "), err)
	}
	if len(refs) == 0 {
		return nil, nil
	}
	return []string{lockTables("SHARE ROW EXCLUSIVE", refs...)}, nil
}

// primaryKey is each partitioned table's primary key: how a row written
// during a move finds its copy (createPartitions, step 3).
var primaryKey = map[string]string{
	"events":             "id, created_at",
	"webhook_deliveries": "id, event_created_at",
	"webhook_attempts":   "id, event_created_at",
	"idempotency_keys":   "merchant_id, livemode, key, created_at",
}

// mover builds the week partitions of one table in a createPartitions
// transaction.
type mover struct {
	tx     *txn
	table  string
	col    string      // the partition column
	cols   string      // the table's columns, quoted, for the copies' column lists
	def    string      // the default partition
	staged []time.Time // the Mondays of the weeks' tables, in order
	rows   int64       // the rows in the weeks' tables
	capped bool        // the default partition may hold rows of weeks not staged
}

// detachedName is the name a partition detached from its table keeps
// until dropDetached drops it, after the detach's commit: the default
// partition a move replaced, a week past its retention. Unique, so that a
// run never finds the name taken by an earlier run's table left undropped.
func detachedName(partition string) string {
	return fmt.Sprintf("%s_detached_%d", partition, time.Now().UnixMicro())
}

// dropDetached drops the tables detached from tables' partitions
// (detachedName; and <table>_moved, which versions before it left) and
// not dropped yet, each in two transactions:
//
//  1. TRUNCATE: its commit removes the data's files, a tenth of a second
//     or more per million rows, holding a lock on that table alone. (A
//     DROP in the transaction of the DETACH made the table's writers and
//     readers wait for it.)
//  2. DROP TABLE: the DETACH gave the table foreign keys of its own,
//     whose triggers live on the referenced tables (merchants,
//     webhook_endpoints), and removing them takes ACCESS EXCLUSIVE on those
//     until commit: every query of them, and every write that checks a
//     key of theirs, waits meanwhile. So this commit must have no files
//     left to remove, and its wait for the lock is short (dropEmptied):
//     when in-flight transactions hold the referenced tables longer, the
//     table is left, empty, for the next run.
func (s *Store) dropDetached(ctx context.Context, wait bool, tables []string) error {
	var names []string
	err := s.maintenanceTx(ctx, wait, func(tx *txn) error {
		const q = `SELECT c.relname FROM pg_class c, unnest($1::text[]) t
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND NOT c.relispartition
			AND (c.relname = t || '_moved' OR (starts_with(c.relname, t || '_') AND c.relname ~ '_detached_[0-9]+$'))
		ORDER BY c.relname`
		return tx.SelectContext(ctx, &names, q, pq.Array(tables))
	})
	if err != nil {
		return fmt.Errorf("list the detached partitions: %w", err)
	}
	for _, name := range names {
		q := pq.QuoteIdentifier(name)
		if err := s.maintenanceTx(ctx, wait, func(tx *txn) error {
			if exists, err := relationExists(ctx, tx, q); err != nil || !exists {
				return err // or dropped by another run meanwhile
			}
			_, err := tx.ExecContext(ctx, `TRUNCATE `+q)
			return err
		}); err != nil {
			return fmt.Errorf("truncate %s: %w", name, err)
		}
		if err := s.dropEmptied(ctx, wait, q); err != nil {
			return fmt.Errorf("drop %s: %w", name, err)
		}
	}
	return nil
}

// relationExists reports whether the relation q (quoted) exists.
func relationExists(ctx context.Context, tx *txn, q string) (bool, error) {
	var exists bool
	err := tx.GetContext(ctx, &exists, `SELECT to_regclass($1) IS NOT NULL`, q)
	return exists, err
}

// dropEmptied drops the detached table q (quoted) if it is empty (its
// TRUNCATE did not run when another run held the maintenance lock), with
// a short wait for merchants and webhook_endpoints: the queries of them
// that arrive while it waits queue behind it. It tries a few times; when
// each time in-flight transactions held those tables past the wait, it
// leaves the table to the next run.
func (s *Store) dropEmptied(ctx context.Context, wait bool, q string) error {
	const tries, lockWait, pause = 5, "20ms", 50 * time.Millisecond
	for i := range tries {
		err := s.maintenanceTx(ctx, wait, func(tx *txn) error {
			if exists, err := relationExists(ctx, tx, q); err != nil || !exists {
				return err // or dropped by another run meanwhile
			}
			var rows bool
			if err := tx.GetContext(ctx, &rows, `SELECT EXISTS (SELECT 1 FROM `+q+`)`); err != nil || rows {
				return err // rows: the next run truncates it first
			}
			if _, err := tx.ExecContext(ctx, `SELECT set_config('lock_timeout', $1, true)`, lockWait); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `DROP TABLE IF EXISTS `+q)
			return err
		})
		var pe *pq.Error
		if !errors.As(err, &pe) || pe.Code != "55P03" { // lock_not_available
			return err
		}
		if i < tries-1 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(pause):
			}
		}
	}
	return nil
}

func (m *mover) name(d time.Time) string { return m.table + "_" + d.Format("20060102") }

func (m *mover) names() []string {
	out := make([]string, len(m.staged))
	for i, d := range m.staged {
		out[i] = m.name(d)
	}
	return out
}

// weeks returns the Mondays of the weeks of the rows of the relation rel
// (quoted).
func (m *mover) weeks(ctx context.Context, rel string) ([]time.Time, error) {
	var days []time.Time
	q := fmt.Sprintf(`SELECT DISTINCT date_trunc('week', %s AT TIME ZONE 'UTC') AS week FROM %s ORDER BY week`, m.col, rel)
	if err := m.tx.SelectContext(ctx, &days, q); err != nil {
		return nil, fmt.Errorf("list the weeks of the rows of %s: %w", rel, err)
	}
	for i, d := range days {
		days[i] = time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, time.UTC)
	}
	return days, nil
}

// rangeCond is the condition of week d's rows, for a query's WHERE.
func (m *mover) rangeCond(d time.Time) string {
	return fmt.Sprintf(`%s >= %s AND %s < %s`, m.col, literalTime(d), m.col, literalTime(d.AddDate(0, 0, partitionSpan)))
}

func literalTime(t time.Time) string {
	return pq.QuoteLiteral(t.UTC().Format(time.RFC3339)) + "::timestamptz"
}

// stage creates week d's table and, if fill is set, copies the default
// partition's rows of that week into it.
func (m *mover) stage(ctx context.Context, d time.Time, fill bool) error {
	name := pq.QuoteIdentifier(m.name(d))
	ddl := fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES, CONSTRAINT %s CHECK (%s))`,
		name, pq.QuoteIdentifier(m.table), pq.QuoteIdentifier(m.name(d)+"_week"), m.rangeCond(d))
	if _, err := m.tx.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("create %s: %w", m.name(d), err)
	}
	m.staged = append(m.staged, d)
	if !fill {
		return nil
	}
	q := fmt.Sprintf(`INSERT INTO %s (%s) SELECT %s FROM %s WHERE %s`, name, m.cols, m.cols, pq.QuoteIdentifier(m.def), m.rangeCond(d))
	return m.exec(ctx, fmt.Sprintf("copy the rows of %s out of %s", m.name(d), m.def), q, 1)
}

// exec runs q, adding sign times the rows it affects to m.rows.
func (m *mover) exec(ctx context.Context, what, q string, sign int64) error {
	res, err := m.tx.ExecContext(ctx, q)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	m.rows += sign * n
	return nil
}

// carryOver copies the default partition's rows written (inserted or
// updated) by transaction from or a later one (carryFrom) into their weeks'
// tables, replacing their copies. Run under the parent's EXCLUSIVE lock,
// when every such transaction has ended.
func (m *mover) carryOver(ctx context.Context, from int64) error {
	// The full (epoch-qualified) id of a row's xmin is this transaction's
	// less the xmin's age: age() counts from this transaction's id, which
	// step 1's CREATE TABLE assigned. A VACUUM FREEZE during the copy
	// does not hide a row from this: freezing marks the row and keeps its
	// xmin (checked on PostgreSQL 15: the same xmin and age before and
	// after). Only FrozenTransactionId, which rows frozen before 9.4 carry,
	// has the largest age: older than any, rightly.
	var xid int64
	if err := m.tx.GetContext(ctx, &xid, `SELECT pg_current_xact_id()::text::bigint`); err != nil {
		return fmt.Errorf("transaction id: %w", err)
	}
	q := fmt.Sprintf(`CREATE TEMPORARY TABLE partition_changed ON COMMIT DROP AS SELECT %s FROM %s
		WHERE $1::bigint - age(xmin) >= $2::bigint`, m.cols, pq.QuoteIdentifier(m.def))
	res, err := m.tx.ExecContext(ctx, q, xid, from)
	if err != nil {
		return fmt.Errorf("find the rows of %s written during the copy: %w", m.def, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil
	}
	weeks, err := m.weeks(ctx, "partition_changed")
	if err != nil {
		return err
	}
	for _, d := range weeks {
		if !slices.ContainsFunc(m.staged, d.Equal) {
			if len(m.staged) >= maxWeeksPerRun {
				m.capped = true
				continue // left in the default partition (swap)
			}
			if err := m.stage(ctx, d, false); err != nil {
				return err
			}
		}
		name := pq.QuoteIdentifier(m.name(d))
		pk := primaryKey[m.table]
		del := fmt.Sprintf(`DELETE FROM %s WHERE (%s) IN (SELECT %s FROM partition_changed)`, name, pk, pk)
		if err := m.exec(ctx, "replace the rows of "+m.name(d)+" written during the copy", del, -1); err != nil {
			return err
		}
		ins := fmt.Sprintf(`INSERT INTO %s (%s) SELECT %s FROM partition_changed WHERE %s`, name, m.cols, m.cols, m.rangeCond(d))
		if err := m.exec(ctx, "copy the rows of "+m.name(d)+" written during the copy", ins, 1); err != nil {
			return err
		}
	}
	slices.SortFunc(m.staged, time.Time.Compare)
	return nil
}

// swap gives the weeks' tables the parent's foreign keys and attaches them,
// replacing the default partition when it had rows, and checks the rows
// against the default partition's (createPartitions, steps 4 and 5).
func (m *mover) swap(ctx context.Context) error {
	var inDefault int64
	if err := m.tx.GetContext(ctx, &inDefault, `SELECT count(*) FROM `+pq.QuoteIdentifier(m.def)); err != nil {
		return fmt.Errorf("count the rows of %s: %w", m.def, err)
	}
	withRows := inDefault > 0
	parent, def := pq.QuoteIdentifier(m.table), pq.QuoteIdentifier(m.def)
	old := detachedName(m.def) // the default partition's, once detached
	// Every lock the steps below wait for, in short tries: the tables the
	// keys reference (the ATTACHes add the keys' triggers there), and the
	// default partition (ACCESS EXCLUSIVE: the DETACH's, or else each
	// ATTACH's, to check that it holds no row of the week), which waits
	// for the table's readers too.
	locks, err := lockReferenced(ctx, m.tx, []string{m.table})
	if err != nil {
		return err
	}
	var steps []string
	if withRows {
		locks = append(locks, fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s`, parent, def))
		steps = append(steps, fmt.Sprintf(`ALTER TABLE %s RENAME TO %s`, def, pq.QuoteIdentifier(old)))
	} else {
		locks = append(locks, lockTables("ACCESS EXCLUSIVE", m.def))
	}
	if err := lockStep(ctx, m.tx, 20, locks...); err != nil {
		return fmt.Errorf("lock %s for its swap: %w", m.def, err)
	}
	for _, d := range m.staged {
		name := pq.QuoteIdentifier(m.name(d))
		steps = append(steps,
			fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)`, parent, name,
				literalTime(d), literalTime(d.AddDate(0, 0, partitionSpan))),
			fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT %s`, name, pq.QuoteIdentifier(m.name(d)+"_week")))
	}
	if withRows {
		steps = append(steps, fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s DEFAULT`, def, parent))
	}
	for _, q := range steps {
		if _, err := m.tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("attach the weeks of %s: %w", m.table, err)
		}
	}
	if m.capped && withRows {
		// The rows of the weeks beyond maxWeeksPerRun go back into the new
		// default partition, for the next runs.
		var staged []string
		for _, d := range m.staged {
			staged = append(staged, "("+m.rangeCond(d)+")")
		}
		overriding := ""
		if m.table == "events" {
			overriding = " OVERRIDING SYSTEM VALUE" // keep seq
		}
		back := fmt.Sprintf(`INSERT INTO %s (%s)%s SELECT %s FROM %s WHERE NOT (%s)`, parent, m.cols, overriding, m.cols,
			pq.QuoteIdentifier(old), strings.Join(staged, " OR "))
		if err := m.exec(ctx, "return the rows of the weeks left to "+m.def, back, 1); err != nil {
			return err
		}
	}
	// Every row of the default partition is in a week's table or back in
	// the new default partition; else the transaction rolls back.
	if m.rows != inDefault {
		return fmt.Errorf("move the rows of %s: %d rows copied or returned, %d in it (rows deleted during the move?)", m.def, m.rows, inDefault)
	}
	return nil
}

// dropExpired drops, a partition name's suffix at a time (a week, or a
// _before_ bound) in one transaction for all of tables, the partitions
// that end at or before cutoff. For the event tables, a suffix whose
// webhook_deliveries partition still holds a pending delivery is kept
// (checked after its DETACH, which waits for a resend writing into it).
// The transaction detaches and renames them; dropDetached drops them
// after its commit, so that the DETACH's lock on each table (ACCESS
// EXCLUSIVE: its readers and writers wait) is held for catalog changes
// only.
func (s *Store) dropExpired(ctx context.Context, tables []string, cutoff time.Time) ([]string, error) {
	var dropped []string
	// The suffixes to drop, from the first table's partitions and the others'.
	suffixes := map[string]bool{}
	err := s.maintenanceTx(ctx, false, func(tx *txn) error {
		for _, table := range tables {
			parts, err := partitions(ctx, tx, table)
			if err != nil {
				return err
			}
			for _, p := range parts {
				if !p.until.After(cutoff) {
					suffixes[strings.TrimPrefix(p.name, table)] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(suffixes))
	for k := range suffixes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, suffix := range keys {
		var names []string
		err := s.maintenanceTx(ctx, false, func(tx *txn) error {
			names = names[:0]
			var parents []string // the tables with a partition of this suffix
			for _, table := range tables {
				exists, err := relationExists(ctx, tx, pq.QuoteIdentifier(table+suffix))
				if err != nil {
					return fmt.Errorf("look up %s: %w", table+suffix, err)
				}
				if exists {
					parents = append(parents, table)
				}
			}
			if len(parents) == 0 {
				return nil
			}
			// Each DETACH takes ACCESS EXCLUSIVE on its table until commit:
			// all of them at once, in short tries, so that one table's
			// queries do not wait through the tries for the next one's.
			// And the tables their keys reference, whose lock each DETACH
			// takes too (lockReferenced).
			refs, err := lockReferenced(ctx, tx, parents)
			if err != nil {
				return err
			}
			if err := lockStep(ctx, tx, 20, append([]string{lockTables("ACCESS EXCLUSIVE", parents...)}, refs...)...); err != nil {
				return fmt.Errorf("lock %s to detach their %s partitions: %w", strings.Join(parents, ", "), suffix, err)
			}
			for _, table := range parents {
				name := table + suffix
				detach := fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s`, pq.QuoteIdentifier(table), pq.QuoteIdentifier(name))
				if _, err := tx.ExecContext(ctx, detach); err != nil {
					return fmt.Errorf("detach %s: %w", name, err)
				}
				if table == "webhook_deliveries" {
					var pending bool
					q := fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE status = 'pending')`, pq.QuoteIdentifier(name))
					if err := tx.GetContext(ctx, &pending, q); err != nil {
						return fmt.Errorf("look for pending deliveries in %s: %w", name, err)
					}
					if pending {
						return errKeepPartition
					}
				}
				rename := fmt.Sprintf(`ALTER TABLE %s RENAME TO %s`, pq.QuoteIdentifier(name), pq.QuoteIdentifier(detachedName(name)))
				if _, err := tx.ExecContext(ctx, rename); err != nil {
					return fmt.Errorf("rename %s: %w", name, err)
				}
				names = append(names, name)
			}
			return nil
		})
		if errors.Is(err, errKeepPartition) {
			continue // rolled back: the week stays until its deliveries end
		}
		if err != nil {
			return dropped, err
		}
		dropped = append(dropped, names...)
	}
	return dropped, nil
}

// errKeepPartition rolls back a week's drop that found a pending delivery.
var errKeepPartition = errors.New("partition holds a pending delivery")
