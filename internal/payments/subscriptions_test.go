package payments

import (
	"encoding/json"
	"testing"
	"time"
)

var allStatuses = []string{SubActive, SubTrialing, SubPastDue, SubUnpaid, SubCanceled, SubIncomplete, SubIncompleteExpired, SubPaused}

// TestCancel covers the spec's two cancel transitions from every status.
func TestCancel(t *testing.T) {
	now := utc("2025-04-16T00:00:00Z")
	for _, status := range allStatuses {
		ended := status == SubCanceled || status == SubIncompleteExpired
		t.Run(status+" now", func(t *testing.T) {
			s := monthlySub(0)
			s.Status, s.CancelAtPeriodEnd = status, status == SubActive // an active one with a scheduled cancellation too
			changed, err := s.Cancel(false, now)
			if ended {
				if ErrorCode(err) != ValidationError || changed || s.Status != status {
					t.Errorf("got changed %v, %v, status %s; want validation_error and nothing changed", changed, err, s.Status)
				}
				return
			}
			if err != nil || !changed {
				t.Fatalf("got changed %v, %v; want a change", changed, err)
			}
			if s.Status != SubCanceled || s.CancelAtPeriodEnd || s.CanceledAt == nil || !s.CanceledAt.Equal(now) ||
				s.EndedAt == nil || !s.EndedAt.Equal(now) {
				t.Errorf("got %s, cancel_at_period_end %v, canceled_at %v, ended_at %v; want canceled now", s.Status, s.CancelAtPeriodEnd, s.CanceledAt, s.EndedAt)
			}
			if _, err := s.Cancel(false, now); ErrorCode(err) != ValidationError {
				t.Errorf("canceling again: got %v, want validation_error", err)
			}
		})
		t.Run(status+" at period end", func(t *testing.T) {
			s := monthlySub(0)
			s.Status = status
			changed, err := s.Cancel(true, now)
			if ended || status == SubIncomplete {
				if ErrorCode(err) != ValidationError || changed || s.CancelAtPeriodEnd {
					t.Errorf("got changed %v, %v, scheduled %v; want validation_error", changed, err, s.CancelAtPeriodEnd)
				}
				return
			}
			if err != nil || !changed || !s.CancelAtPeriodEnd || s.Status != status || s.CanceledAt != nil || s.EndedAt != nil {
				t.Errorf("got changed %v, %v, %s, scheduled %v, canceled_at %v; want scheduled, status kept", changed, err, s.Status, s.CancelAtPeriodEnd, s.CanceledAt)
			}
			changed, err = s.Cancel(true, now)
			if err != nil || changed || !s.CancelAtPeriodEnd {
				t.Errorf("scheduling twice: got changed %v, %v; want no change, no error", changed, err)
			}
		})
	}
}

func TestResume(t *testing.T) {
	before, atEnd := utc("2025-04-30T23:59:59Z"), april.End
	for _, c := range []struct {
		name      string
		status    string
		scheduled bool
		now       time.Time
		ok        bool
	}{
		{"scheduled active", SubActive, true, before, true},
		{"scheduled trialing", SubTrialing, true, before, true},
		{"scheduled past_due", SubPastDue, true, before, true},
		{"scheduled unpaid", SubUnpaid, true, before, true},
		{"scheduled paused", SubPaused, true, before, true},
		{"nothing scheduled", SubActive, false, before, false},
		{"paused, nothing scheduled", SubPaused, false, before, false},
		{"period over: the cancellation took effect", SubActive, true, atEnd, false},
		{"canceled", SubCanceled, false, before, false},
		{"canceled, flag left set", SubCanceled, true, before, false},
		{"incomplete_expired", SubIncompleteExpired, false, before, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := monthlySub(0)
			s.Status, s.CancelAtPeriodEnd = c.status, c.scheduled
			err := s.Resume(c.now)
			if c.ok != (err == nil) || (err != nil && ErrorCode(err) != ValidationError) {
				t.Fatalf("got %v, want ok %v (else validation_error)", err, c.ok)
			}
			if c.ok && (s.CancelAtPeriodEnd || s.Status != c.status) {
				t.Errorf("got scheduled %v, status %s; want cleared, %s", s.CancelAtPeriodEnd, s.Status, c.status)
			}
			if !c.ok && s.CancelAtPeriodEnd != c.scheduled {
				t.Errorf("a refused resume changed cancel_at_period_end to %v", s.CancelAtPeriodEnd)
			}
		})
	}
}

func TestQuantityByStatus(t *testing.T) {
	now := utc("2025-04-16T00:00:00Z")
	for _, status := range allStatuses {
		t.Run(status, func(t *testing.T) {
			s := monthlySub(0)
			s.Status = status
			_, err := s.ChangeQuantity(QuantityRequest{Quantity: 6}, now)
			refused := status == SubCanceled || status == SubIncompleteExpired || status == SubIncomplete
			if refused {
				if ErrorCode(err) != ValidationError || s.Items[0].Quantity != 5 {
					t.Errorf("got %v, quantity %d; want validation_error, 5", err, s.Items[0].Quantity)
				}
				return
			}
			if err != nil || s.Items[0].Quantity != 6 {
				t.Errorf("got %v, quantity %d; want 6", err, s.Items[0].Quantity)
			}
		})
	}
}

func TestEndIfDue(t *testing.T) {
	for _, c := range []struct {
		name      string
		status    string
		scheduled bool
		now       time.Time
		ends      bool
	}{
		{"scheduled, period over", SubActive, true, april.End, true},
		{"scheduled, later still", SubPastDue, true, april.End.Add(time.Hour), true},
		{"scheduled, period not over", SubActive, true, april.End.Add(-time.Second), false},
		{"not scheduled", SubActive, false, april.End, false},
		{"already canceled", SubCanceled, true, april.End, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := monthlySub(0)
			s.Status, s.CancelAtPeriodEnd = c.status, c.scheduled
			if got := s.EndIfDue(c.now); got != c.ends {
				t.Fatalf("got %v, want %v", got, c.ends)
			}
			if c.ends && (s.Status != SubCanceled || s.CancelAtPeriodEnd || !s.EndedAt.Equal(april.End) || !s.CanceledAt.Equal(april.End)) {
				t.Errorf("got %s, ended_at %v; want canceled at the period end %s", s.Status, s.EndedAt, april.End)
			}
			if !c.ends && s.Status != c.status {
				t.Errorf("status changed to %s", s.Status)
			}
		})
	}
}

// TestRenewedAnchors: renewals follow the anchor, never the previous end,
// and a trial's end becomes the anchor.
func TestRenewedAnchors(t *testing.T) {
	trialEnd := utc("2025-01-31T12:00:00Z")
	s := monthlySub(0)
	s.Status, s.TrialEnd = SubTrialing, &trialEnd
	s.Anchor, s.CurrentPeriodStart, s.CurrentPeriodEnd = utc("2025-01-17T12:00:00Z"), utc("2025-01-17T12:00:00Z"), trialEnd
	want := []string{"2025-02-28T12:00:00Z", "2025-03-31T12:00:00Z", "2025-04-30T12:00:00Z", "2025-05-31T12:00:00Z"}
	start := trialEnd
	for i, w := range want {
		s.Renewed()
		if s.Status != SubActive || !s.Anchor.Equal(trialEnd) || !s.CurrentPeriodStart.Equal(start) || !s.CurrentPeriodEnd.Equal(utc(w)) {
			t.Fatalf("renewal %d: got %s anchor %s [%s, %s), want active anchored at the trial end [%s, %s)", i+1, s.Status,
				s.Anchor, s.CurrentPeriodStart, s.CurrentPeriodEnd, start, w)
		}
		start = utc(w)
	}
}

func TestBillRenewal(t *testing.T) {
	for _, c := range []struct{ pending, charge, after int64 }{
		{1000, 6000, 0}, {-1000, 4000, 0}, {-5000, 0, 0}, {-7000, 0, -2000},
	} {
		s := monthlySub(c.pending)
		if got := s.NextChargeAmount(); got != c.charge {
			t.Errorf("pending %d: next charge %d, want %d", c.pending, got, c.charge)
		}
		if got := s.BillRenewal(); got != c.charge {
			t.Errorf("pending %d: billed %d, want %d", c.pending, got, c.charge)
		}
		if s.PendingProration != c.after {
			t.Errorf("pending %d: after the renewal %d pending, want %d", c.pending, s.PendingProration, c.after)
		}
	}
}

func TestRenewalFailed(t *testing.T) {
	s := monthlySub(0)
	s.RenewalFailed(false)
	if s.Status != SubPastDue {
		t.Errorf("got %s, want past_due", s.Status)
	}
	s.RenewalFailed(true)
	if s.Status != SubUnpaid {
		t.Errorf("got %s, want unpaid", s.Status)
	}
	s.Renewed()
	if s.Status != SubActive {
		t.Errorf("got %s after a successful charge, want active", s.Status)
	}
	s.Status = SubCanceled
	if s.RenewalFailed(false); s.Status != SubCanceled {
		t.Errorf("an ended subscription moved to %s", s.Status)
	}
}

func TestSubscriptionObject(t *testing.T) {
	s := monthlySub(-250)
	s.Items[0].Price.Interval = Interval{Month, 3}
	s.Metadata, s.Created, s.Live = nil, utc("2025-01-01T00:00:00Z"), true
	s.Cancel(false, utc("2025-04-16T00:00:00Z"))
	raw, err := json.Marshal(s.Object())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"sub_1","object":"subscription","status":"canceled","customer":"cus_1","quantity":5,` +
		`"items":[{"id":"si_1","object":"subscription_item","price":{"id":"price_1","object":"price","amount":1000,"currency":"usd","interval":"month","interval_count":3},"quantity":5}],` +
		`"current_period_start":1743465600,"current_period_end":1746057600,"cancel_at_period_end":false,` +
		`"canceled_at":1744761600,"ended_at":1744761600,"trial_end":null,"pending_proration_amount":-250,` +
		`"metadata":{},"created":1735689600,"livemode":true}`
	if string(raw) != want {
		t.Errorf("got\n%s\nwant\n%s", raw, want)
	}
}
