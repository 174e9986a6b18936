package tasks_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"paysvc/internal/tasks"
)

// TestDeliveryRetryIn: a receiver's Retry-After is waited out when it is
// longer than the backoff, capped at 12 h, and rounded up to a whole second
// because asynq keeps retry times in whole seconds, rounded down.
func TestDeliveryRetryIn(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 10, 300_000_000, time.UTC) // …:10.3
	base := 20 * time.Millisecond
	cases := []struct {
		name       string
		retryAfter time.Duration
		wantAt     time.Time // exact, or zero: the backoff (within its jitter)
	}{
		{"no Retry-After", 0, time.Time{}},
		{"shorter than the backoff", 10 * time.Millisecond, time.Time{}},
		{"2 s: the whole second at or after now+2s", 2 * time.Second, now.Add(2*time.Second + 700*time.Millisecond)},
		{"on a whole second already", 1700 * time.Millisecond, now.Add(1700 * time.Millisecond)},
		{"beyond the cap: 12 h", 48 * time.Hour, now.Add(12*time.Hour + 700*time.Millisecond)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := tasks.DeliveryRetryIn(base, 0, c.retryAfter, now)
			if c.wantAt.IsZero() {
				if d < 18*time.Millisecond || d > 22*time.Millisecond {
					t.Errorf("got %v, want the 20 ms backoff ±10%%", d)
				}
				return
			}
			if got := now.Add(d); !got.Equal(c.wantAt) {
				t.Errorf("got retry at %v, want %v", got, c.wantAt)
			}
			// asynq's view: the retry runs from the second it stores on.
			if runs := time.Unix(now.Add(d).Unix(), 0); runs.Before(now.Add(min(c.retryAfter, 12*time.Hour))) {
				t.Errorf("asynq would run it at %v, before now+Retry-After %v", runs, now.Add(c.retryAfter))
			}
		})
	}
	// RetryDelay hands asynq the wait the worker decided and recorded.
	delay := tasks.RetryDelay(base)(3, &tasks.RetryIn{Delay: 7 * time.Second, Err: errors.New("x")}, asynq.NewTask(tasks.TypeDeliverWebhook, nil))
	if delay != 7*time.Second {
		t.Errorf("RetryDelay with a RetryIn error: got %v, want 7s", delay)
	}
}
