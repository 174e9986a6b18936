package payments

import (
	"context"
	"time"
)

// MaxClockAdvance bounds one move of a sandbox clock: ten years is past any
// trial, retry schedule or annual renewal a test needs, and keeps the
// stored offset far from overflowing.
const MaxClockAdvance = 10 * 365 * 24 * time.Hour

// ClockAdvance is what `api sandbox advance-clock` reports: the scope's
// clock after the move and what the move made happen in the scope, whether
// the command did it or a worker or the scheduler did meanwhile.
type ClockAdvance struct {
	MerchantID      string `json:"merchant_id"`
	Mode            string `json:"mode"`
	OffsetSeconds   int64  `json:"offset_seconds"` // how far the clock is ahead of real time
	Now             int64  `json:"now"`            // the scope's time after the move, Unix seconds
	ExpiredSessions int    `json:"expired_sessions"`
	ClosedDisputes  int    `json:"closed_disputes"`
	// Renewals and RenewalFailures count the scope's renewal charges that
	// succeeded and the attempts that were declined (dunning retries
	// included); EndedSubscriptions its subscriptions that ended (their
	// scheduled cancellations took effect).
	Renewals           int `json:"renewals"`
	RenewalFailures    int `json:"renewal_failures"`
	EndedSubscriptions int `json:"ended_subscriptions"`
}

// ClockTally counts a scope's rows in the states advance-clock reports
// on. None of them leaves its state, so the difference of two tallies is
// what happened in the scope between them, whoever did it: the command's
// own sweeps, or the scheduler's and the workers' running beside it (which
// counts taken from the command's own sweeps would miss, and which sweep
// every merchant, not the scope alone).
type ClockTally struct {
	ExpiredSessions    int // checkout sessions expired
	LostDisputes       int // disputes lost (an overdue one is closed as lost)
	Renewals           int // renewal charges succeeded
	RenewalAttempts    int // renewal charges' attempts, declined or not
	EndedSubscriptions int // subscriptions canceled
}

// report is what happened between two tallies, from then to t.
func (t ClockTally) report(then ClockTally, out *ClockAdvance) {
	out.ExpiredSessions = t.ExpiredSessions - then.ExpiredSessions
	out.ClosedDisputes = t.LostDisputes - then.LostDisputes
	out.Renewals = t.Renewals - then.Renewals
	// Every attempt but a charge's success was declined.
	out.RenewalFailures = t.RenewalAttempts - then.RenewalAttempts - out.Renewals
	out.EndedSubscriptions = t.EndedSubscriptions - then.EndedSubscriptions
}

// SweepBatch bounds one transaction of a sweep (session expiry, overdue
// disputes), whether the scheduler's or advance-clock's.
const SweepBatch = 500

// AdvanceClock moves the scope's sandbox clock forward by `by` and then
// runs, at once, the sweeps whose work may have come due (checkout-session
// expiry, overdue disputes, renewals, dunning retries and scheduled
// cancellations: the scope's charges that came due are charged before it
// returns), so that a test sees their effects when the command returns
// instead of at the scheduler's next tick. The sweeps are the scheduler's
// own and idempotent: running them here as well as there does nothing
// twice. Codes: validation_error (not the sandbox, by out of range, no
// such merchant).
func (s *Service) AdvanceClock(ctx context.Context, sc Scope, by time.Duration) (ClockAdvance, error) {
	if s.clock.offsets == nil {
		return ClockAdvance{}, Errorf(ValidationError, "The clock can be moved only with the sandbox processor (PROCESSOR=sandbox).")
	}
	if by <= 0 || by > MaxClockAdvance {
		return ClockAdvance{}, Invalid("by", "must be a positive duration of at most %s", MaxClockAdvance)
	}
	if _, err := s.store.MerchantPlan(ctx, sc.MerchantID); err != nil {
		return ClockAdvance{}, err
	}
	before, err := s.store.ClockTally(ctx, sc)
	if err != nil {
		return ClockAdvance{}, err
	}
	off, err := s.store.AdvanceClock(ctx, sc, by)
	if err != nil {
		return ClockAdvance{}, err
	}
	s.clock.remember(sc, off) // this process sees the move at once
	mode := "test"
	if sc.Live {
		mode = "live"
	}
	out := ClockAdvance{MerchantID: sc.MerchantID, Mode: mode, OffsetSeconds: int64(off / time.Second)}
	if _, err = Drain(ctx, s.ExpireSessions); err != nil {
		return out, err
	}
	if _, err = Drain(ctx, s.CloseOverdueDisputes); err != nil {
		return out, err
	}
	if err := s.runDueRenewals(ctx, sc); err != nil {
		return out, err
	}
	after, err := s.store.ClockTally(ctx, sc)
	if err != nil {
		return out, err
	}
	after.report(before, &out)
	out.Now = s.clock.Now(ctx, sc).Unix()
	return out, nil
}

// Drain runs a sweep batch after batch (each its own transaction) until one
// comes back short, and returns how many rows changed.
func Drain(ctx context.Context, batch func(ctx context.Context, limit int) (int, error)) (int, error) {
	total := 0
	for {
		n, err := batch(ctx, SweepBatch)
		total += n
		if err != nil || n < SweepBatch {
			return total, err
		}
	}
}
