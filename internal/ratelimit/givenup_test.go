package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"paysvc/internal/testenv"
)

// calledGivenUp makes 20,000 concurrent calls with an ended context and
// returns how many of them came back wrong: the queue answers such calls
// itself, and their callers may find that answer and their context done at
// once, so the answer must be an error too.
func calledGivenUp(call func(ctx context.Context) (ok bool)) int64 {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for range 20000 {
		wg.Go(func() {
			if !call(ctx) {
				wrong.Add(1)
			}
		})
	}
	wg.Wait()
	return wrong.Load()
}

// TestGivenUpChecksAnswerAnError: a check whose caller gave up gets an
// error, never an empty refusal (a 429 with a limit of 0).
func TestGivenUpChecksAnswerAnError(t *testing.T) {
	t.Parallel()
	l := New(testenv.Redis(t), 1000)
	if n := calledGivenUp(func(ctx context.Context) bool {
		_, err := l.Allow(ctx, "key_gone")
		return err != nil
	}); n != 0 {
		t.Errorf("%d of 20,000 checks with an ended context came back without an error", n)
	}
}

// TestGivenUpCallsAnswerACommand: the batcher answers every EVALSHA with a
// command, one carrying the context's error when its caller gave up:
// redis_rate reads the answer's error, and a nil command would panic on the
// queue's goroutine, where nothing recovers.
func TestGivenUpCallsAnswerACommand(t *testing.T) {
	t.Parallel()
	b := newBatcher(testenv.Redis(t))
	if n := calledGivenUp(func(ctx context.Context) bool {
		cmd := b.EvalSha(ctx, "0000000000000000000000000000000000000000", []string{"k"})
		return cmd != nil && cmd.Err() != nil
	}); n != 0 {
		t.Errorf("%d of 20,000 calls with an ended context came back without a command carrying an error", n)
	}
}
