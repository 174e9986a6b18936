package testenv

import (
	"testing"
	"time"
)

// UnlessPaused runs try, a check of something bounded in time (an answer
// before a deadline), and fails t with its error unless the machine stood
// still for more than margin while it ran: the VMs CI runs on stop for
// 40-180 ms now and then, which no deadline of tens of milliseconds
// survives. Then try runs again, up to three times in all; code that
// misses its deadline without a pause still fails on the first try.
func UnlessPaused(t *testing.T, margin time.Duration, try func() error) {
	t.Helper()
	const tries = 3
	for i := 1; ; i++ {
		stop := watchPauses()
		err := try()
		paused := stop()
		switch {
		case err == nil:
			return
		case paused <= margin || i == tries:
			t.Fatalf("%v (longest pause meanwhile %v, try %d)", err, paused.Round(time.Millisecond), i)
		default:
			t.Logf("try %d: %v; the machine stood still for %v meanwhile, trying again", i, err, paused.Round(time.Millisecond))
		}
	}
}

// watchPauses samples the clock every millisecond on a goroutine of its
// own until stop is called; stop returns the longest gap between samples
// beyond that millisecond: how long this process stood still meanwhile,
// its timers with it.
func watchPauses() (stop func() time.Duration) {
	var longest time.Duration
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				now := time.Now()
				longest = max(longest, now.Sub(last)-time.Millisecond)
				last = now
			}
		}
	}()
	return func() time.Duration {
		close(done)
		<-finished
		return longest
	}
}
