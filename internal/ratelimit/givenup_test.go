package ratelimit

import (
	"context"
	"testing"

	"paysvc/internal/testenv"
)

// TestGivenUpChecksAnswerAnError: a check whose caller gave up gets an
// error, never an empty refusal (a 429 with a limit of 0).
func TestGivenUpChecksAnswerAnError(t *testing.T) {
	t.Parallel()
	l := New(testenv.Redis(t), 1000)
	if n := testenv.CallGivenUp(func(ctx context.Context) bool {
		_, err := l.Allow(ctx, "key_gone")
		return err != nil
	}); n != 0 {
		t.Errorf("%d of 20,000 checks with an ended context came back without an error", n)
	}
}

// TestGivenUpCallsAnswerACommand: the batcher answers every EVALSHA with a
// command, one carrying the context's error when its caller gave up: the
// script's Run reads the answer's error, and a nil command would panic on
// the queue's goroutine, where nothing recovers.
func TestGivenUpCallsAnswerACommand(t *testing.T) {
	t.Parallel()
	b := newBatcher(testenv.Redis(t))
	if n := testenv.CallGivenUp(func(ctx context.Context) bool {
		cmd := b.EvalSha(ctx, "0000000000000000000000000000000000000000", []string{"k"})
		return cmd != nil && cmd.Err() != nil
	}); n != 0 {
		t.Errorf("%d of 20,000 calls with an ended context came back without a command carrying an error", n)
	}
}
