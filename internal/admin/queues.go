package admin

import (
	"slices"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
)

// queueDepth exports Asynq's queue sizes at scrape time, for dashboards and
// autoscaling (deploy/k8s/hpa.example.yaml scales the workers on it):
// paysvc_queue_tasks{queue,state} for state pending, active, scheduled,
// retry and archived, and paysvc_queue_oldest_pending_seconds{queue}, the
// age of the oldest pending task (0 when none waits). Both are the whole
// queue's, the same from every process that exports them (aggregate with
// max, not sum).
//
// One scrape reads each queue once (a few Redis commands) and waits at most
// readyTimeout; when Redis does not answer in time the series are left out
// (paysvc_dependency_up{dependency="redis"} says why), and a read still
// under way makes the next scrape skip rather than pile up.
type queueDepth struct {
	insp   *asynq.Inspector
	queues []string
	busy   sync.Mutex
}

var (
	queueTasksDesc = prometheus.NewDesc("paysvc_queue_tasks",
		"Tasks in an Asynq queue by state (pending, active, scheduled, retry, archived), read from Redis at scrape time.",
		[]string{"queue", "state"}, nil)
	queueOldestDesc = prometheus.NewDesc("paysvc_queue_oldest_pending_seconds",
		"Age of the oldest pending task of an Asynq queue (0 when none is pending), read from Redis at scrape time.",
		[]string{"queue"}, nil)
)

func (q *queueDepth) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueTasksDesc
	ch <- queueOldestDesc
}

func (q *queueDepth) Collect(ch chan<- prometheus.Metric) {
	if !q.busy.TryLock() {
		return
	}
	done := make(chan []prometheus.Metric, 1)
	go func() {
		defer q.busy.Unlock()
		var ms []prometheus.Metric
		known, err := q.insp.Queues()
		if err != nil {
			done <- nil
			return
		}
		for _, name := range q.queues {
			info := &asynq.QueueInfo{} // nothing was ever enqueued on it
			if slices.Contains(known, name) {
				if info, err = q.insp.GetQueueInfo(name); err != nil {
					done <- nil
					return
				}
			}
			for state, n := range map[string]int{"pending": info.Pending, "active": info.Active, "scheduled": info.Scheduled,
				"retry": info.Retry, "archived": info.Archived} {
				ms = append(ms, prometheus.MustNewConstMetric(queueTasksDesc, prometheus.GaugeValue, float64(n), name, state))
			}
			ms = append(ms, prometheus.MustNewConstMetric(queueOldestDesc, prometheus.GaugeValue, info.Latency.Seconds(), name))
		}
		done <- ms
	}()
	select {
	case ms := <-done:
		for _, m := range ms {
			ch <- m
		}
	case <-time.After(readyTimeout):
	}
}
