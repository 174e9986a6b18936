package worker_test

import (
	"testing"

	"github.com/hibiken/asynq"

	"paysvc/internal/tasks"
	"paysvc/internal/worker"
)

// TestEveryKindHasAHandler checks that the worker handles every task type
// of the job registry: a kind without a handler would be queued forever.
func TestEveryKindHasAHandler(t *testing.T) {
	mux := asynq.NewServeMux()
	(&worker.Handlers{}).Register(mux)
	(&worker.Deliverer{}).Register(mux)
	for _, k := range tasks.Kinds {
		if _, pattern := mux.Handler(asynq.NewTask(k.Type, nil)); pattern != k.Type {
			t.Errorf("job kind %s: task type %q has no handler in the worker (pattern %q)", k.Job, k.Type, pattern)
		}
	}
}
