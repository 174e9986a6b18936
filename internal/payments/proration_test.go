package payments

import (
	"encoding/json"
	"math/big"
	"reflect"
	"testing"
	"time"
)

func TestProrate(t *testing.T) {
	for _, c := range []struct {
		amount, num, den, want int64
	}{
		{5000, 1, 2, 2500},
		{1, 1, 2, 1}, // 0.5 → 1: halves away from zero
		{3, 1, 2, 2}, // 1.5 → 2
		{5, 1, 2, 3}, // 2.5 → 3 (not banker's 2)
		{1, 1, 3, 0}, // 0.333 → 0
		{2, 1, 3, 1}, // 0.667 → 1
		{5, 1, 4, 1}, // 1.25 → 1
		{7, 1, 4, 2}, // 1.75 → 2
		{5000, 2, 3, 3333},
		{7000, 2, 3, 4667},
		{10, 0, 5, 0},
		{10, 5, 5, 10},
		{0, 1, 2, 0},
		{99999999000, 2592000, 2592000, 99999999000},
	} {
		if got := prorate(c.amount, c.num, c.den); got != c.want {
			t.Errorf("prorate(%d, %d, %d) = %d, want %d", c.amount, c.num, c.den, got, c.want)
		}
	}
}

// TestProrateNoOverflow: a 52-year period in seconds times the largest
// amount overflows int64; the result must still be exact.
func TestProrateNoOverflow(t *testing.T) {
	amount := int64(MaxAmount) * maxQuantity
	p := Period{Start: utc("2024-02-29T00:00:00Z"), End: PeriodEnd(utc("2024-02-29T00:00:00Z"), Interval{Year, 52}, 1)}
	den := p.End.Unix() - p.Start.Unix()
	for _, num := range []int64{1, den / 3, den/2 + 1, den - 7, den} {
		want := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(amount), big.NewInt(num)), big.NewInt(den))
		f, _ := want.Float64()
		w := int64(f + 0.5)
		got := prorate(amount, num, den)
		// Exact check: |got·den − amount·num| ≤ den/2.
		diff := new(big.Int).Sub(new(big.Int).Mul(big.NewInt(got), big.NewInt(den)), new(big.Int).Mul(big.NewInt(amount), big.NewInt(num)))
		if diff.Abs(diff).Cmp(big.NewInt(den/2)) > 0 || got < w-1 || got > w+1 {
			t.Errorf("prorate(%d, %d, %d) = %d, want %s rounded", amount, num, den, got, want.FloatString(3))
		}
	}
}

// april is a 30-day period: 2,592,000 seconds.
var april = Period{N: 1, Start: utc("2025-04-01T00:00:00Z"), End: utc("2025-05-01T00:00:00Z")}

func TestProrationLines(t *testing.T) {
	for _, c := range []struct {
		name           string
		unit           int64
		oldQ, newQ     int
		at             string
		credit, charge int64 // 0, 0 = no lines
	}{
		{"at the start: whole periods", 1000, 5, 7, "2025-04-01T00:00:00Z", -5000, 7000},
		{"half way", 1000, 5, 7, "2025-04-16T00:00:00Z", -2500, 3500},
		{"two thirds left: each line rounded on its own", 1000, 5, 7, "2025-04-11T00:00:00Z", -3333, 4667},
		{"fewer seats half way", 1000, 7, 5, "2025-04-16T00:00:00Z", -3500, 2500},
		{"halves away from zero, both signs", 3, 1, 2, "2025-04-16T00:00:00Z", -2, 3},
		{"to the second: one second used", 2592000, 1, 2, "2025-04-01T00:00:01Z", -2591999, 5183998},
		{"sub-second part of the time is ignored", 2592000, 1, 2, "2025-04-01T00:00:01.999Z", -2591999, 5183998},
		{"one second left", 1000, 5, 7, "2025-04-30T23:59:59Z", 0, 0},
		{"one second left of a big amount", 2592000, 1, 3, "2025-04-30T23:59:59Z", -1, 3},
		{"same quantity: nothing", 1000, 5, 5, "2025-04-16T00:00:00Z", 0, 0},
		{"at the end: outside the period", 1000, 5, 7, "2025-05-01T00:00:00Z", 0, 0},
		{"before the start: outside the period", 1000, 5, 7, "2025-03-31T23:59:59Z", 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			lines := ProrationLines(c.unit, c.oldQ, c.newQ, april, utc(c.at))
			if c.credit == 0 && c.charge == 0 && (c.oldQ == c.newQ || !utc(c.at).Before(april.End) || utc(c.at).Before(april.Start)) {
				if lines != nil {
					t.Fatalf("got %+v, want no lines", lines)
				}
				return
			}
			if len(lines) != 2 {
				t.Fatalf("got %d lines, want 2", len(lines))
			}
			if lines[0].Amount != c.credit || lines[1].Amount != c.charge {
				t.Errorf("got credit %d, charge %d; want %d, %d", lines[0].Amount, lines[1].Amount, c.credit, c.charge)
			}
			if lines[0].Quantity != c.oldQ || lines[1].Quantity != c.newQ || !lines[1].To.Equal(april.End) ||
				lines[0].From.Unix() != utc(c.at).Unix() {
				t.Errorf("got lines %+v, want quantities %d, %d from %s to the period end", lines, c.oldQ, c.newQ, c.at)
			}
		})
	}
}

func TestParseProrationBehavior(t *testing.T) {
	s := func(v string) *string { return &v }
	for in, want := range map[*string]ProrationBehavior{nil: CreateProrations, s("create_prorations"): CreateProrations,
		s("always_invoice"): AlwaysInvoice, s("none"): ProrationNone} {
		if got, err := ParseProrationBehavior(in); got != want || err != nil {
			t.Errorf("ParseProrationBehavior(%v) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "None", "always", "create_proration", "invoice"} {
		if _, err := ParseProrationBehavior(&bad); ErrorCode(err) != ValidationError {
			t.Errorf("ParseProrationBehavior(%q): got %v, want validation_error", bad, err)
		}
	}
}

// monthlySub is an active subscription in April (30 days) of 5 seats at 1000.
func monthlySub(pending int64) Subscription {
	return Subscription{
		ID: "sub_1", CustomerID: "cus_1", Status: SubActive, Anchor: utc("2025-01-01T00:00:00Z"),
		Items: []SubscriptionItem{{ID: "si_1", Quantity: 5,
			Price: RecurringPrice{ID: "price_1", Amount: 1000, Currency: "usd", Interval: Interval{Monthly, 1}}}},
		CurrentPeriodStart: april.Start, CurrentPeriodEnd: april.End, PendingProration: pending,
	}
}

func TestPreviewQuantityBehaviours(t *testing.T) {
	half := utc("2025-04-16T00:00:00Z")
	for _, c := range []struct {
		name          string
		behavior      ProrationBehavior
		status        string
		pending       int64
		newQ          int
		lines         []int64
		proration     int64
		pendingAfter  int64
		amountDue     int64
		wantQuantityN int
	}{
		{"create_prorations: pending items for the renewal", CreateProrations, SubActive, 0, 7, []int64{-2500, 3500}, 1000, 1000, 0, 7},
		{"create_prorations adds to pending items", CreateProrations, SubActive, 300, 7, []int64{-2500, 3500}, 1000, 1300, 0, 7},
		{"create_prorations of fewer seats: a pending credit", CreateProrations, SubActive, 0, 3, []int64{-2500, 1500}, -1000, -1000, 0, 3},
		{"default behaviour is create_prorations", "", SubActive, 0, 7, []int64{-2500, 3500}, 1000, 1000, 0, 7},
		{"always_invoice: charged now", AlwaysInvoice, SubActive, 0, 7, []int64{-2500, 3500}, 1000, 0, 1000, 7},
		{"always_invoice bills pending items with it", AlwaysInvoice, SubActive, 300, 7, []int64{-2500, 3500}, 1000, 0, 1300, 7},
		{"always_invoice of fewer seats: a credit, nothing charged", AlwaysInvoice, SubActive, 300, 3, []int64{-2500, 1500}, -1000, -700, 0, 3},
		{"always_invoice: a credit smaller than the pending items", AlwaysInvoice, SubActive, 1500, 3, []int64{-2500, 1500}, -1000, 0, 500, 3},
		{"none: nothing until the renewal", ProrationNone, SubActive, 300, 7, []int64{}, 0, 300, 0, 7},
		{"past_due prorates like active", CreateProrations, SubPastDue, 0, 7, []int64{-2500, 3500}, 1000, 1000, 0, 7},
		{"trialing: the trial is free, nothing prorated", AlwaysInvoice, SubTrialing, 0, 7, []int64{}, 0, 0, 0, 7},
		{"same quantity: no lines", AlwaysInvoice, SubActive, 0, 5, []int64{}, 0, 0, 0, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := monthlySub(c.pending)
			s.Status = c.status
			qc, err := s.PreviewQuantity(QuantityRequest{Quantity: c.newQ, Behavior: c.behavior}, half)
			if err != nil {
				t.Fatal(err)
			}
			var lines []int64
			for _, l := range qc.Lines {
				lines = append(lines, l.Amount)
			}
			if lines == nil {
				lines = []int64{}
			}
			if !reflect.DeepEqual(lines, c.lines) || qc.Proration != c.proration || qc.PendingAfter != c.pendingAfter || qc.AmountDue != c.amountDue {
				t.Errorf("got lines %v, proration %d, pending after %d, due %d; want %v, %d, %d, %d",
					lines, qc.Proration, qc.PendingAfter, qc.AmountDue, c.lines, c.proration, c.pendingAfter, c.amountDue)
			}
			if s.Items[0].Quantity != 5 || s.PendingProration != c.pending {
				t.Errorf("a preview changed the subscription: quantity %d, pending %d", s.Items[0].Quantity, s.PendingProration)
			}
			got, err := s.ChangeQuantity(QuantityRequest{Quantity: c.newQ, Behavior: c.behavior}, half)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, qc) {
				t.Errorf("change at the same time = %+v, want the preview %+v", got, qc)
			}
			if s.Items[0].Quantity != c.wantQuantityN || s.PendingProration != c.pendingAfter {
				t.Errorf("after the change: quantity %d, pending %d; want %d, %d", s.Items[0].Quantity, s.PendingProration, c.wantQuantityN, c.pendingAfter)
			}
		})
	}
}

// TestPreviewIsBinding: a preview is a value; stored (as JSON) and applied
// later it bills exactly its amount, and a change made later with its
// proration date computes the same; a preview of another state is refused.
func TestPreviewIsBinding(t *testing.T) {
	previewAt, later := utc("2025-04-11T00:00:00Z"), utc("2025-04-20T08:00:00Z")
	s := monthlySub(0)
	qc, err := s.PreviewQuantity(QuantityRequest{Quantity: 7, Behavior: AlwaysInvoice}, previewAt)
	if err != nil {
		t.Fatal(err)
	}
	if qc.AmountDue != 1334 { // -3333 + 4667
		t.Fatalf("preview due %d, want 1334", qc.AmountDue)
	}
	raw, err := json.Marshal(qc)
	if err != nil {
		t.Fatal(err)
	}
	var stored QuantityChange
	if err := json.Unmarshal(raw, &stored); err != nil {
		t.Fatal(err)
	}

	t.Run("applied later, from storage", func(t *testing.T) {
		s := monthlySub(0)
		if err := s.ApplyQuantityChange(stored); err != nil {
			t.Fatal(err)
		}
		if s.Items[0].Quantity != 7 || s.PendingProration != 0 {
			t.Errorf("got quantity %d, pending %d; want 7, 0", s.Items[0].Quantity, s.PendingProration)
		}
	})
	t.Run("changed later with the preview's proration date", func(t *testing.T) {
		s := monthlySub(0)
		pd := stored.ProrationDate
		got, err := s.ChangeQuantity(QuantityRequest{Quantity: 7, Behavior: AlwaysInvoice, ProrationDate: &pd}, later)
		if err != nil {
			t.Fatal(err)
		}
		if got.AmountDue != qc.AmountDue || !reflect.DeepEqual(got.Lines, qc.Lines) {
			t.Errorf("got due %d lines %+v, want the preview's %d %+v", got.AmountDue, got.Lines, qc.AmountDue, qc.Lines)
		}
		// Without the date, the later change prorates less time.
		s2 := monthlySub(0)
		now, _ := s2.ChangeQuantity(QuantityRequest{Quantity: 7, Behavior: AlwaysInvoice}, later)
		if now.AmountDue >= qc.AmountDue {
			t.Errorf("a change 9 days later is due %d, want less than %d", now.AmountDue, qc.AmountDue)
		}
	})
	for _, c := range []struct {
		name   string
		mutate func(s *Subscription)
	}{
		{"quantity changed since", func(s *Subscription) { s.Items[0].Quantity = 6 }},
		{"pending items changed since", func(s *Subscription) { s.PendingProration = 1 }},
		{"period renewed since", func(s *Subscription) { s.Renewed() }},
		{"another subscription", func(s *Subscription) { s.ID = "sub_2" }},
		{"another item", func(s *Subscription) { s.Items[0].ID = "si_2" }},
		{"canceled since", func(s *Subscription) { s.Cancel(false, later) }},
	} {
		t.Run("refused: "+c.name, func(t *testing.T) {
			s := monthlySub(0)
			c.mutate(&s)
			before := s.Items[0].Quantity
			if err := s.ApplyQuantityChange(stored); ErrorCode(err) != ValidationError {
				t.Errorf("got %v, want validation_error", err)
			}
			if s.Items[0].Quantity != before {
				t.Errorf("quantity changed to %d on a refused change", s.Items[0].Quantity)
			}
		})
	}
}

func TestPreviewQuantityRefused(t *testing.T) {
	now := utc("2025-04-16T00:00:00Z")
	at := func(s string) *time.Time { t := utc(s); return &t }
	two := monthlySub(0)
	two.Items = append(two.Items, SubscriptionItem{ID: "si_2", Quantity: 1, Price: two.Items[0].Price})
	for _, c := range []struct {
		name string
		sub  Subscription
		req  QuantityRequest
	}{
		{"quantity 0", monthlySub(0), QuantityRequest{Quantity: 0}},
		{"quantity 1001", monthlySub(0), QuantityRequest{Quantity: 1001}},
		{"unknown behaviour", monthlySub(0), QuantityRequest{Quantity: 2, Behavior: "sometimes"}},
		{"unknown item", monthlySub(0), QuantityRequest{Quantity: 2, ItemID: "si_x"}},
		{"no item named among two", two, QuantityRequest{Quantity: 2}},
		{"proration date in the future", monthlySub(0), QuantityRequest{Quantity: 2, ProrationDate: at("2025-04-16T00:00:01Z")}},
		{"proration date before the period", monthlySub(0), QuantityRequest{Quantity: 2, ProrationDate: at("2025-03-31T23:59:59Z")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := c.sub.PreviewQuantity(c.req, now); ErrorCode(err) != ValidationError {
				t.Errorf("got %v, want validation_error", err)
			}
		})
	}
	t.Run("the named item of two", func(t *testing.T) {
		qc, err := two.PreviewQuantity(QuantityRequest{Quantity: 3, ItemID: "si_2"}, now)
		if err != nil || qc.ItemID != "si_2" || qc.OldQuantity != 1 || qc.Proration != 1000 { // -500 + 1500
			t.Errorf("got %+v, %v; want si_2 from 1 to 3, proration 1000", qc, err)
		}
	})
	t.Run("proration date at the period start", func(t *testing.T) {
		qc, err := monthlySub(0).PreviewQuantity(QuantityRequest{Quantity: 7, ProrationDate: at("2025-04-01T00:00:00Z")}, now)
		if err != nil || qc.Proration != 2000 {
			t.Errorf("got %+v, %v; want proration 2000", qc, err)
		}
	})
}
