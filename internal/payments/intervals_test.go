package payments

import (
	"testing"
	"time"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func TestProductInterval(t *testing.T) {
	for _, name := range []string{"weekly", "bi-weekly", "monthly", "bi-monthly", "quarterly", "semi-annual", "annual"} {
		iv, err := ProductInterval(name)
		if err != nil || iv != (Interval{Name: name, Count: 1}) {
			t.Errorf("ProductInterval(%q) = %v, %v; want {%s 1}, nil", name, iv, err, name)
		}
	}
	for _, name := range []string{"", "Monthly", "MONTHLY", " monthly", "monthly ", "month", "day", "week", "year",
		"biweekly", "bi_weekly", "bimonthly", "semiannual", "yearly", "daily", "twice-monthly", "monthly\x00", "1"} {
		if iv, err := ProductInterval(name); ErrorCode(err) != InvalidInterval {
			t.Errorf("ProductInterval(%q) = %v, %v; want invalid_interval", name, iv, err)
		}
	}
}

func TestUnitInterval(t *testing.T) {
	n := func(i int) *int { return &i }
	for _, c := range []struct {
		unit  string
		count *int
		want  Interval
	}{
		{"day", nil, Interval{"day", 1}},
		{"week", n(1), Interval{"week", 1}},
		{"month", n(2), Interval{"month", 2}},
		{"year", n(52), Interval{"year", 52}},
		{"day", n(52), Interval{"day", 52}},
	} {
		iv, err := UnitInterval(c.unit, c.count)
		if err != nil || iv != c.want {
			t.Errorf("UnitInterval(%q, %v) = %v, %v; want %v", c.unit, c.count, iv, err, c.want)
		}
	}
	for _, c := range []struct {
		unit  string
		count *int
	}{
		{"month", n(0)}, {"month", n(53)}, {"day", n(-1)}, {"week", n(1 << 40)},
		{"monthly", nil}, {"weekly", n(1)}, {"days", nil}, {"Month", nil}, {"", nil}, {"hour", n(1)},
	} {
		if iv, err := UnitInterval(c.unit, c.count); ErrorCode(err) != InvalidInterval {
			t.Errorf("UnitInterval(%q, %v) = %v, %v; want invalid_interval", c.unit, c.count, iv, err)
		}
	}
}

func TestNewInterval(t *testing.T) {
	for _, c := range []struct {
		name  string
		count int
		ok    bool
	}{
		{"weekly", 1, true}, {"annual", 1, true}, {"month", 1, true}, {"month", 52, true},
		{"weekly", 2, false}, {"monthly", 0, false}, {"month", 0, false}, {"month", 53, false}, {"", 0, false}, {"fortnightly", 1, false},
	} {
		_, err := NewInterval(c.name, c.count)
		if (err == nil) != c.ok || (err != nil && ErrorCode(err) != InvalidInterval) {
			t.Errorf("NewInterval(%q, %d) = %v; want ok %v (else invalid_interval)", c.name, c.count, err, c.ok)
		}
		if got := (Interval{c.name, c.count}).Valid(); got != c.ok {
			t.Errorf("Interval{%q, %d}.Valid() = %v, want %v", c.name, c.count, got, c.ok)
		}
	}
}

func TestPeriodEnd(t *testing.T) {
	type end struct {
		n    int
		want string
	}
	for _, c := range []struct {
		name   string
		iv     Interval
		anchor string
		ends   []end
	}{
		{"weekly is 7 days", Interval{Weekly, 1}, "2025-01-01T10:00:00Z", []end{
			{0, "2025-01-01T10:00:00Z"}, {1, "2025-01-08T10:00:00Z"}, {2, "2025-01-15T10:00:00Z"}, {52, "2025-12-31T10:00:00Z"}}},
		{"bi-weekly is 14 days", Interval{BiWeekly, 1}, "2025-01-01T10:00:00Z", []end{
			{1, "2025-01-15T10:00:00Z"}, {2, "2025-01-29T10:00:00Z"}, {26, "2025-12-31T10:00:00Z"}}},
		{"weekly across a leap day", Interval{Weekly, 1}, "2024-02-26T00:00:00Z", []end{{1, "2024-03-04T00:00:00Z"}}},
		{"monthly from Jan 31: Feb 28, Mar 31, Apr 30", Interval{Monthly, 1}, "2025-01-31T09:30:00Z", []end{
			{1, "2025-02-28T09:30:00Z"}, {2, "2025-03-31T09:30:00Z"}, {3, "2025-04-30T09:30:00Z"}, {4, "2025-05-31T09:30:00Z"},
			{5, "2025-06-30T09:30:00Z"}, {11, "2025-12-31T09:30:00Z"}, {12, "2026-01-31T09:30:00Z"}, {13, "2026-02-28T09:30:00Z"}}},
		{"monthly from Jan 31 in a leap year: Feb 29", Interval{Monthly, 1}, "2024-01-31T00:00:00Z", []end{
			{1, "2024-02-29T00:00:00Z"}, {2, "2024-03-31T00:00:00Z"}, {13, "2025-02-28T00:00:00Z"}, {49, "2028-02-29T00:00:00Z"}}},
		{"monthly from Jan 30", Interval{Monthly, 1}, "2025-01-30T00:00:00Z", []end{
			{1, "2025-02-28T00:00:00Z"}, {2, "2025-03-30T00:00:00Z"}}},
		{"monthly from Jan 29 in a leap year", Interval{Monthly, 1}, "2024-01-29T00:00:00Z", []end{
			{1, "2024-02-29T00:00:00Z"}, {2, "2024-03-29T00:00:00Z"}}},
		{"monthly from Mar 31", Interval{Monthly, 1}, "2025-03-31T00:00:00Z", []end{
			{1, "2025-04-30T00:00:00Z"}, {2, "2025-05-31T00:00:00Z"}, {3, "2025-06-30T00:00:00Z"}}},
		{"monthly keeps the clock to the second", Interval{Monthly, 1}, "2025-01-31T23:59:59Z", []end{
			{1, "2025-02-28T23:59:59Z"}, {2, "2025-03-31T23:59:59Z"}}},
		{"monthly from the 15th", Interval{Monthly, 1}, "2025-01-15T12:00:00Z", []end{
			{1, "2025-02-15T12:00:00Z"}, {12, "2026-01-15T12:00:00Z"}}},
		{"bi-monthly is every two months, not twice a month", Interval{BiMonthly, 1}, "2025-01-15T00:00:00Z", []end{
			{1, "2025-03-15T00:00:00Z"}, {6, "2026-01-15T00:00:00Z"}}},
		{"bi-monthly from Dec 31", Interval{BiMonthly, 1}, "2024-12-31T00:00:00Z", []end{
			{1, "2025-02-28T00:00:00Z"}, {2, "2025-04-30T00:00:00Z"}, {3, "2025-06-30T00:00:00Z"}, {4, "2025-08-31T00:00:00Z"}}},
		{"quarterly from Nov 30", Interval{Quarterly, 1}, "2024-11-30T00:00:00Z", []end{
			{1, "2025-02-28T00:00:00Z"}, {2, "2025-05-30T00:00:00Z"}, {3, "2025-08-30T00:00:00Z"}, {4, "2025-11-30T00:00:00Z"}}},
		{"quarterly from Aug 31 into a leap February", Interval{Quarterly, 1}, "2023-08-31T00:00:00Z", []end{
			{1, "2023-11-30T00:00:00Z"}, {2, "2024-02-29T00:00:00Z"}, {3, "2024-05-31T00:00:00Z"}}},
		{"semi-annual from Aug 31", Interval{SemiAnnual, 1}, "2023-08-31T00:00:00Z", []end{
			{1, "2024-02-29T00:00:00Z"}, {2, "2024-08-31T00:00:00Z"}, {3, "2025-02-28T00:00:00Z"}}},
		{"annual from Feb 29: Feb 28, and Feb 29 in the next leap year", Interval{Annual, 1}, "2024-02-29T08:00:00Z", []end{
			{1, "2025-02-28T08:00:00Z"}, {2, "2026-02-28T08:00:00Z"}, {3, "2027-02-28T08:00:00Z"}, {4, "2028-02-29T08:00:00Z"}, {100, "2124-02-29T08:00:00Z"}}},
		{"annual from Feb 29 across 2100 (not a leap year)", Interval{Annual, 1}, "2096-02-29T00:00:00Z", []end{
			{4, "2100-02-28T00:00:00Z"}, {8, "2104-02-29T00:00:00Z"}}},
		{"annual", Interval{Annual, 1}, "2025-06-15T00:00:00Z", []end{{1, "2026-06-15T00:00:00Z"}}},
		{"day", Interval{Day, 1}, "2025-03-30T01:30:00Z", []end{{1, "2025-03-31T01:30:00Z"}, {2, "2025-04-01T01:30:00Z"}}},
		{"30 days", Interval{Day, 30}, "2025-01-31T00:00:00Z", []end{{1, "2025-03-02T00:00:00Z"}, {2, "2025-04-01T00:00:00Z"}}},
		{"3 weeks", Interval{Week, 3}, "2025-01-01T00:00:00Z", []end{{1, "2025-01-22T00:00:00Z"}, {2, "2025-02-12T00:00:00Z"}}},
		{"month × 1 is monthly", Interval{Month, 1}, "2025-01-31T00:00:00Z", []end{{1, "2025-02-28T00:00:00Z"}, {2, "2025-03-31T00:00:00Z"}}},
		{"5 months from Jan 31", Interval{Month, 5}, "2025-01-31T00:00:00Z", []end{{1, "2025-06-30T00:00:00Z"}, {2, "2025-11-30T00:00:00Z"}, {3, "2026-04-30T00:00:00Z"}}},
		{"2 years from Feb 29", Interval{Year, 2}, "2024-02-29T00:00:00Z", []end{{1, "2026-02-28T00:00:00Z"}, {2, "2028-02-29T00:00:00Z"}}},
		{"52 years", Interval{Year, 52}, "2024-02-29T00:00:00Z", []end{{1, "2076-02-29T00:00:00Z"}}},
		{"52 months", Interval{Month, 52}, "2025-01-31T00:00:00Z", []end{{1, "2029-05-31T00:00:00Z"}}},
		{"52 weeks", Interval{Week, 52}, "2025-01-01T00:00:00Z", []end{{1, "2025-12-31T00:00:00Z"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, e := range c.ends {
				if got := PeriodEnd(utc(c.anchor), c.iv, e.n); !got.Equal(utc(e.want)) || got.Location() != time.UTC {
					t.Errorf("PeriodEnd(%s, %v, %d) = %s, want %s", c.anchor, c.iv, e.n, got.Format(time.RFC3339), e.want)
				}
			}
		})
	}
}

// TestPeriodEndInUTC: an anchor given in another zone is the same instant,
// and its periods are computed on the UTC calendar, so a daylight-saving
// change moves nothing.
func TestPeriodEndInUTC(t *testing.T) {
	ny := time.FixedZone("EST", -5*3600)
	anchor := time.Date(2025, 1, 31, 20, 0, 0, 0, ny) // 2025-02-01T01:00:00Z
	if got, want := PeriodEnd(anchor, Interval{Monthly, 1}, 1), utc("2025-03-01T01:00:00Z"); !got.Equal(want) {
		t.Errorf("got %s, want %s", got, want)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no tzdata:", err)
	}
	// The week containing Berlin's spring-forward night is still 168 hours.
	a := time.Date(2025, 3, 28, 12, 0, 0, 0, berlin)
	if got := PeriodEnd(a, Interval{Weekly, 1}, 1).Sub(a); got != 168*time.Hour {
		t.Errorf("weekly over a DST change lasts %s, want 168h", got)
	}
}

func TestPeriodAt(t *testing.T) {
	mo := Interval{Monthly, 1}
	anchor := utc("2025-01-31T10:00:00Z")
	for _, c := range []struct {
		at         string
		n          int
		start, end string
	}{
		{"2024-12-01T00:00:00Z", 1, "2025-01-31T10:00:00Z", "2025-02-28T10:00:00Z"}, // before the anchor: the first
		{"2025-01-31T10:00:00Z", 1, "2025-01-31T10:00:00Z", "2025-02-28T10:00:00Z"},
		{"2025-02-28T09:59:59Z", 1, "2025-01-31T10:00:00Z", "2025-02-28T10:00:00Z"},
		{"2025-02-28T10:00:00Z", 2, "2025-02-28T10:00:00Z", "2025-03-31T10:00:00Z"},
		{"2025-03-31T09:00:00Z", 2, "2025-02-28T10:00:00Z", "2025-03-31T10:00:00Z"},
		{"2025-03-31T11:00:00Z", 3, "2025-03-31T10:00:00Z", "2025-04-30T10:00:00Z"},
		{"2025-05-01T00:00:00Z", 4, "2025-04-30T10:00:00Z", "2025-05-31T10:00:00Z"},
		{"2026-02-28T10:00:00Z", 14, "2026-02-28T10:00:00Z", "2026-03-31T10:00:00Z"},
	} {
		p := PeriodAt(anchor, mo, utc(c.at))
		if p.N != c.n || !p.Start.Equal(utc(c.start)) || !p.End.Equal(utc(c.end)) {
			t.Errorf("PeriodAt(%s) = #%d [%s, %s), want #%d [%s, %s)", c.at, p.N, p.Start.Format(time.RFC3339),
				p.End.Format(time.RFC3339), c.n, c.start, c.end)
		}
	}
}

// TestPeriodAtEveryInterval walks ten years hour by hour-and-a-bit for every
// interval and checks that the period found contains t and is the anchored one.
func TestPeriodAtEveryInterval(t *testing.T) {
	ivs := []Interval{{Weekly, 1}, {BiWeekly, 1}, {Monthly, 1}, {BiMonthly, 1}, {Quarterly, 1}, {SemiAnnual, 1}, {Annual, 1},
		{Day, 1}, {Day, 52}, {Week, 3}, {Month, 7}, {Year, 2}}
	for _, anchor := range []time.Time{utc("2024-02-29T23:59:59Z"), utc("2025-01-31T00:00:00Z"), utc("2025-08-15T12:34:56Z")} {
		for _, iv := range ivs {
			for t0 := anchor.Add(-48 * time.Hour); t0.Before(anchor.AddDate(10, 0, 0)); t0 = t0.Add(97*time.Hour + 13*time.Second) {
				p := PeriodAt(anchor, iv, t0)
				if !p.End.After(t0) || (t0.After(anchor) && p.Start.After(t0)) || p.N < 1 ||
					!p.Start.Equal(PeriodEnd(anchor, iv, p.N-1)) || !p.End.Equal(PeriodEnd(anchor, iv, p.N)) {
					t.Fatalf("PeriodAt(%s, %v, %s) = %+v: not the anchored period containing it", anchor, iv, t0, p)
				}
			}
		}
	}
}
