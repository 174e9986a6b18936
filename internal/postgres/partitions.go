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
// touches are the partitions of these four tables, listed from the catalog.
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
// them), then drops (DETACH, then DROP) the partitions entirely older than
// their retention: events, their deliveries and attempts when their week
// ended keepEvents before now — but not while the week still holds a
// pending delivery, which is still owed to an endpoint; Idempotency-Key
// records keepKeys after (when every record in them has expired). Each
// table's creations are one transaction, each week's drops another, each under the maintenance advisory lock; a run that
// finds the lock taken returns at once (another one is doing the work).
func (s *Store) MaintainPartitions(ctx context.Context, now time.Time, keepEvents, keepKeys time.Duration) (payments.PartitionChanges, error) {
	var ch payments.PartitionChanges
	for _, table := range []string{"events", "webhook_deliveries", "webhook_attempts", "idempotency_keys"} {
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
// partition, that no partition covers yet.
func (s *Store) createPartitions(ctx context.Context, table string, first, last time.Time) ([]string, error) {
	var created []string
	err := s.maintenanceTx(ctx, true, func(tx *txn) error {
		created = created[:0]
		parts, err := partitions(ctx, tx, table)
		if err != nil {
			return err
		}
		col := partitionColumn[table]
		var days []time.Time
		for d := first; !d.After(last); d = d.AddDate(0, 0, partitionSpan) {
			days = append(days, d)
		}
		var stray []time.Time // at most maxStrayWeeks of them a run
		q := fmt.Sprintf(`SELECT DISTINCT date_trunc('week', %s AT TIME ZONE 'UTC') AS week FROM %s ORDER BY week LIMIT %d`,
			col, pq.QuoteIdentifier(table+"_default"), maxStrayWeeks)
		if err := tx.SelectContext(ctx, &stray, q); err != nil {
			return fmt.Errorf("list the days of %s_default: %w", table, err)
		}
		for _, d := range stray {
			d = time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, time.UTC)
			if !slices.ContainsFunc(days, d.Equal) {
				days = append(days, d)
			}
		}
		locked := false
		for _, d := range days {
			covered := slices.ContainsFunc(parts, func(p partition) bool {
				return p.day.Equal(d) || (p.day.IsZero() && !p.until.Before(d.AddDate(0, 0, partitionSpan)))
			})
			if covered {
				continue
			}
			name := table + "_" + d.Format("20060102")
			if !locked {
				// EXCLUSIVE on the parent (reads go on), once, before the first
				// creation: it waits for the writers in flight and makes later
				// ones wait until commit, so no row of a new partition's range
				// can land in the default partition between createPartition's
				// look and its CREATE (which would then fail: the default
				// partition's constraint would be violated), and a writer whose
				// statement would otherwise take its snapshot before a move's
				// DELETE (and find its row gone) sees the row where it lands.
				// The CREATE locks the parent at least as hard.
				lock := fmt.Sprintf(`LOCK TABLE %s IN EXCLUSIVE MODE`, pq.QuoteIdentifier(table))
				if _, err := tx.ExecContext(ctx, lock); err != nil {
					return fmt.Errorf("lock %s for the creation of %s: %w", table, name, err)
				}
				locked = true
			}
			if err := createPartition(ctx, tx, table, col, name, d, d.AddDate(0, 0, partitionSpan)); err != nil {
				return err
			}
			created = append(created, name)
		}
		return nil
	})
	return created, err
}

// maxStrayWeeks bounds how many weeks of rows of a default partition one
// run gives their own partitions (the next runs do the rest).
const maxStrayWeeks = 100

// createPartition creates the partition name of table for [from, to). Rows
// of that range already in the default partition (which would make the
// creation fail) are moved out first and back in after, through a
// temporary table dropped at commit. The caller holds EXCLUSIVE on table
// (createPartitions).
func createPartition(ctx context.Context, tx *txn, table, col, name string, from, to time.Time) error {
	def := pq.QuoteIdentifier(table + "_default")
	var stray bool
	q := fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE %s >= $1 AND %s < $2)`, def, col, col)
	if err := tx.GetContext(ctx, &stray, q, from, to); err != nil {
		return fmt.Errorf("look for rows of %s in %s: %w", name, def, err)
	}
	if stray {
		// The move is a DELETE and an INSERT, not an UPDATE (see the
		// caller's lock).
		tmp := fmt.Sprintf(`CREATE TEMPORARY TABLE partition_move (LIKE %s) ON COMMIT DROP`, pq.QuoteIdentifier(table))
		if _, err := tx.ExecContext(ctx, tmp); err != nil {
			return fmt.Errorf("create table for the rows of %s: %w", name, err)
		}
		mv := fmt.Sprintf(`WITH m AS (DELETE FROM %s WHERE %s >= $1 AND %s < $2 RETURNING *) INSERT INTO partition_move SELECT * FROM m`, def, col, col)
		if _, err := tx.ExecContext(ctx, mv, from, to); err != nil {
			return fmt.Errorf("move rows of %s out of %s: %w", name, def, err)
		}
	}
	ddl := fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM (%s) TO (%s)`, pq.QuoteIdentifier(name), pq.QuoteIdentifier(table),
		pq.QuoteLiteral(from.UTC().Format(time.RFC3339)), pq.QuoteLiteral(to.UTC().Format(time.RFC3339)))
	if _, err := tx.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("create partition %s: %w", name, err)
	}
	if stray {
		overriding := ""
		if table == "events" {
			overriding = " OVERRIDING SYSTEM VALUE" // keep seq
		}
		q := fmt.Sprintf(`INSERT INTO %s%s SELECT * FROM partition_move`, pq.QuoteIdentifier(table), overriding)
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("move rows into %s: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, `DROP TABLE partition_move`); err != nil {
			return fmt.Errorf("drop moved rows' table: %w", err)
		}
	}
	return nil
}

// dropExpired drops, a partition name's suffix at a time (a week, or a
// _before_ bound) in one transaction for all of tables, the partitions
// that end at or before cutoff. For the event tables, a suffix whose
// webhook_deliveries partition still holds a pending delivery is kept
// (checked after its DETACH, which waits for a resend writing into it).
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
			for _, table := range tables {
				name := table + suffix
				var exists bool
				if err := tx.GetContext(ctx, &exists, `SELECT to_regclass($1) IS NOT NULL`, name); err != nil {
					return fmt.Errorf("look up %s: %w", name, err)
				}
				if !exists {
					continue
				}
				if _, err := tx.ExecContext(ctx, fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s`,
					pq.QuoteIdentifier(table), pq.QuoteIdentifier(name))); err != nil {
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
				if _, err := tx.ExecContext(ctx, `DROP TABLE `+pq.QuoteIdentifier(name)); err != nil {
					return fmt.Errorf("drop %s: %w", name, err)
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
