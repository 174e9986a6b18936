package payments

import (
	"fmt"
	"time"

	"paysvc/internal/processor"
)

// Interval is how often a recurring price bills: Count times Name. Name is
// either one of the subscription products' named intervals (weekly …
// annual; Count is then 1) or one of the inline form's units day, week,
// month, year (Count 1..52). The name is kept as the merchant gave it, so a
// product created "bi-monthly" reads back "bi-monthly", while every
// computation goes through span, the one table of what each name means.
//
// Build one with ProductInterval or UnitInterval (or NewInterval when reading
// one back); each returns invalid_interval for anything else, so no other
// code validates intervals.
type Interval struct {
	Name  string
	Count int
}

// The named intervals of subscription products.
const (
	Weekly     = "weekly"
	BiWeekly   = "bi-weekly"
	Monthly    = "monthly"
	BiMonthly  = "bi-monthly"
	Quarterly  = "quarterly"
	SemiAnnual = "semi-annual"
	Annual     = "annual"
)

// The units of the inline subscription-session form.
const (
	Day   = "day"
	Week  = "week"
	Month = "month"
	Year  = "year"
)

// MaxIntervalCount bounds interval_count (spec's Limits).
const MaxIntervalCount = 52

// span is one Name in months or days; exactly one of them is non-zero.
// Bi-monthly is every two months, not twice a month. A year is 12 months,
// so a Feb 29 anchor clamps like any month end.
type span struct{ months, days int }

var namedIntervals = map[string]span{
	Weekly:     {days: 7},
	BiWeekly:   {days: 14},
	Monthly:    {months: 1},
	BiMonthly:  {months: 2},
	Quarterly:  {months: 3},
	SemiAnnual: {months: 6},
	Annual:     {months: 12},
}

var intervalUnits = map[string]span{
	Day:   {days: 1},
	Week:  {days: 7},
	Month: {months: 1},
	Year:  {months: 12},
}

// ProductInterval parses the interval of a subscription product.
// Codes: invalid_interval.
func ProductInterval(name string) (Interval, error) {
	if _, ok := namedIntervals[name]; !ok {
		return Interval{}, Errorf(InvalidInterval,
			"interval %q is not supported: use weekly, bi-weekly, monthly, bi-monthly, quarterly, semi-annual or annual", name)
	}
	return Interval{Name: name, Count: 1}, nil
}

// UnitInterval parses the inline form's interval and interval_count (nil
// means 1). Codes: invalid_interval.
func UnitInterval(unit string, count *int) (Interval, error) {
	if _, ok := intervalUnits[unit]; !ok {
		return Interval{}, Errorf(InvalidInterval, "interval %q is not supported: use day, week, month or year", unit)
	}
	n := 1
	if count != nil {
		n = *count
	}
	if n < 1 || n > MaxIntervalCount {
		return Interval{}, Errorf(InvalidInterval, "interval_count must be between 1 and %d", MaxIntervalCount)
	}
	return Interval{Name: unit, Count: n}, nil
}

// NewInterval accepts either form: a named interval with count 1, or a unit
// with count 1..52 (as stored). Codes: invalid_interval.
func NewInterval(name string, count int) (Interval, error) {
	if _, ok := namedIntervals[name]; ok {
		if count != 1 {
			return Interval{}, Errorf(InvalidInterval, "interval %q takes no interval_count other than 1", name)
		}
		return Interval{Name: name, Count: 1}, nil
	}
	return UnitInterval(name, &count)
}

// Valid reports whether iv is one NewInterval accepts (the zero Interval is not).
func (iv Interval) Valid() bool {
	_, err := NewInterval(iv.Name, iv.Count)
	return err == nil
}

func (iv Interval) String() string {
	if iv.Count == 1 {
		return iv.Name
	}
	return fmt.Sprintf("%d×%s", iv.Count, iv.Name)
}

// span is the length of one period of iv.
func (iv Interval) span() span {
	sp, ok := namedIntervals[iv.Name]
	if !ok {
		sp = intervalUnits[iv.Name]
	}
	return span{months: sp.months * iv.Count, days: sp.days * iv.Count}
}

// PeriodEnd is the end of period n (n ≥ 1; n = 0 gives the anchor) of a
// cycle anchored at anchor: anchor + n×iv, always computed from the anchor,
// never from the previous end, so one short month does not shift every later
// period. Month-based intervals keep the anchor's day and clock time, clamped
// to the last day of a shorter month (Jan 31 monthly: Feb 28 or 29, Mar 31,
// Apr 30; Feb 29 annual: Feb 28, and Feb 29 again in a leap year);
// day-based ones are exact multiples of 24 h. Both are computed in UTC.
// The caller passes a valid Interval; an invalid one has zero length and
// PeriodEnd returns the anchor.
func PeriodEnd(anchor time.Time, iv Interval, n int) time.Time {
	a := anchor.UTC()
	sp := iv.span()
	if sp.days > 0 {
		return a.Add(time.Duration(n*sp.days) * 24 * time.Hour)
	}
	return addMonthsClamped(a, n*sp.months)
}

// addMonthsClamped adds months to t, clamping the day to the target month's
// last day (time.AddDate would overflow Jan 31 + 1 month into March).
func addMonthsClamped(t time.Time, months int) time.Time {
	y, m, d := t.Date()
	first := time.Date(y, m+time.Month(months), 1, t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
	if last := daysIn(first.Year(), first.Month()); d > last {
		d = last
	}
	return first.AddDate(0, 0, d-1)
}

func daysIn(y int, m time.Month) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// Period is one billing period [Start, End) of a cycle, the N-th after the
// anchor (N ≥ 1).
type Period struct {
	N          int
	Start, End time.Time
}

// PeriodAt returns the period of the cycle anchored at anchor that contains
// t: Start ≤ t < End. A t before the anchor gives the first period. The
// caller passes a valid Interval.
func PeriodAt(anchor time.Time, iv Interval, t time.Time) Period {
	a, t := anchor.UTC(), t.UTC()
	if !t.After(a) {
		return Period{N: 1, Start: a, End: PeriodEnd(a, iv, 1)}
	}
	// Estimate n from the calendar, then correct: clamping and clock times
	// can put the estimate one period off either way.
	sp := iv.span()
	n := 1
	if sp.days > 0 {
		n = int(t.Sub(a)/(time.Duration(sp.days)*24*time.Hour)) + 1
	} else if sp.months > 0 {
		ty, tm, _ := t.Date()
		ay, am, _ := a.Date()
		n = ((ty-ay)*12+int(tm-am))/sp.months + 1
	} else {
		return Period{N: 1, Start: a, End: a} // invalid interval: no progress possible
	}
	for n > 1 && PeriodEnd(a, iv, n-1).After(t) {
		n--
	}
	for !PeriodEnd(a, iv, n).After(t) {
		n++
	}
	return Period{N: n, Start: PeriodEnd(a, iv, n-1), End: PeriodEnd(a, iv, n)}
}

// Phrase is one period of iv in words, for pages: "month", "2 weeks",
// "3 months", "year" (every bi-monthly period is "2 months").
func (iv Interval) Phrase() string {
	sp := iv.span()
	n, unit := sp.days, "day"
	switch {
	case sp.months > 0 && sp.months%12 == 0:
		n, unit = sp.months/12, "year"
	case sp.months > 0:
		n, unit = sp.months, "month"
	case sp.days > 0 && sp.days%7 == 0:
		n, unit = sp.days/7, "week"
	}
	if n == 1 {
		return unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// CheckProcessorInterval refuses, with invalid_interval, an interval the
// configured processor cannot bill: Stripe bills at most every 3 years
// (36 months, 156 weeks). The sandbox bills every interval the service
// accepts. Subscription code calls it after parsing an interval and before
// writing anything, so a refused request leaves no row behind.
// Codes: invalid_interval.
func (s *Service) CheckProcessorInterval(iv Interval) error {
	c, ok := s.proc.(processor.IntervalChecker)
	if !ok {
		return nil
	}
	sp := iv.span()
	if c.SupportsInterval(sp.months, sp.days) {
		return nil
	}
	return Errorf(InvalidInterval,
		"interval %s is longer than the payment processor can bill: at most 3 years (36 months or 156 weeks)", iv)
}
