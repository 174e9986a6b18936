package app

import (
	"context"
	"database/sql"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"paysvc/internal/testenv"
)

// The pool's sql.DBStats reach /metrics (the default registry) under the
// process's name: a connection held is one in use, and registering a second
// pool in the same process neither fails nor replaces the first.
func TestPoolMetrics(t *testing.T) {
	db, err := sql.Open("postgres", testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	registerPoolMetrics(db, "pooltest")
	registerPoolMetrics(db, "pooltest") // tests set up more than once: no panic, no error

	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := map[string]float64{}
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "db_name" && l.GetValue() == "pooltest" {
					v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
					got[mf.GetName()] = v
				}
			}
		}
	}
	if got["go_sql_in_use_connections"] != 1 {
		t.Errorf("go_sql_in_use_connections = %v, want 1 (all: %v)", got["go_sql_in_use_connections"], got)
	}
	if _, ok := got["go_sql_wait_duration_seconds_total"]; !ok {
		t.Errorf("no go_sql_wait_duration_seconds_total for the pool: %v", got)
	}
}
