package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"paysvc/internal/testenv"
)

// TestGivenUpCallsAnswerACommand: the batcher answers every EVALSHA with a
// command, one carrying the context's error when its caller gave up before
// its pipeline ran: redis_rate reads the answer's error, and a nil command
// would panic on the queue's goroutine, where nothing recovers.
func TestGivenUpCallsAnswerACommand(t *testing.T) {
	t.Parallel()
	b := newBatcher(testenv.Redis(t))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range 20000 {
		wg.Go(func() {
			if cmd := b.EvalSha(ctx, "0000000000000000000000000000000000000000", []string{"k"}); cmd == nil || cmd.Err() == nil {
				bad.Add(1)
			}
		})
	}
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Errorf("%d of 20,000 calls with an ended context came back without a command carrying an error", n)
	}
}
