package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"paysvc/internal/postgres"
)

// TestPartitionsMaintain: on a new database, whose rows all land in the
// default partitions until the scheduler's first run, `api partitions
// maintain` creates this week's and the next week's partitions and those of
// the weeks its rows are dated in, and moves each row into its week's
// partition; a second run has nothing to do.
func TestPartitionsMaintain(t *testing.T) {
	useTestEnv(t)
	u := useEmptyDatabase(t, "cliparts")
	cli(t, "migrate").wantExit(t, 0, "migrate")

	db, err := postgres.Open(context.Background(), u.String(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now().UTC()
	past := now.AddDate(0, 0, -9) // the week before last: behind any week a run creates ahead
	if _, err := db.Exec(`INSERT INTO merchants (id, name, plan) VALUES ('mch_parts', 'Parts', 'free')`); err != nil {
		t.Fatal(err)
	}
	for i, at := range []time.Time{now, past} {
		if _, err := db.Exec(`INSERT INTO events (id, merchant_id, livemode, type, data, created_at)
			VALUES ($1, 'mch_parts', false, 'product.created', '{}', $2)`, fmt.Sprintf("evt_parts%d", i), at); err != nil {
			t.Fatal(err)
		}
	}
	partitionOf := func(id string) string {
		t.Helper()
		var name string
		if err := db.Get(&name, `SELECT tableoid::regclass::text FROM events WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
		return name
	}
	if got := partitionOf("evt_parts0"); got != "events_default" {
		t.Fatalf("before: event in %s, want events_default (no partitions yet)", got)
	}

	r := cli(t, "partitions", "maintain")
	r.wantExit(t, 0, "partitions maintain")
	var out struct{ Created, Dropped []string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("stdout %q: %v", r.stdout, err)
	}
	week := func(at time.Time) string { return postgres.WeekStart(at).Format("20060102") }
	for _, want := range []string{
		"events_" + week(now), "events_" + week(now.AddDate(0, 0, postgres.PartitionsAhead)), "events_" + week(past),
		"webhook_deliveries_" + week(now), "webhook_attempts_" + week(now), "idempotency_keys_" + week(now),
	} {
		if !slices.Contains(out.Created, want) {
			t.Errorf("created %v: want %s among them", out.Created, want)
		}
	}
	if out.Dropped == nil || len(out.Dropped) != 0 {
		t.Errorf("dropped: got %#v, want [] (nothing has expired)", out.Dropped)
	}
	for id, at := range map[string]time.Time{"evt_parts0": now, "evt_parts1": past} {
		if got, want := partitionOf(id), "events_"+week(at); got != want {
			t.Errorf("after: %s in %s, want %s", id, got, want)
		}
	}

	again := cli(t, "partitions", "maintain")
	again.wantExit(t, 0, "partitions maintain, again")
	if got := again.stdout; got != `{"created":[],"dropped":[]}`+"\n" {
		t.Errorf("second run: got %s, want nothing created or dropped", got)
	}
}
