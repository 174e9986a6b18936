package dashboard

import (
	"testing"
	"time"

	"paysvc/internal/payments"
)

func TestFormatMoney(t *testing.T) {
	tests := []struct {
		amount   int64
		currency string
		want     string
	}{
		{123456, "usd", "$1,234.56"},
		{5, "eur", "€0.05"},
		{-250, "gbp", "-£2.50"},
		{500, "jpy", "¥500"},
		{1234567, "krw", "₩1,234,567"},
		{12345, "kwd", "12.345 KWD"},
		{100, "sek", "1.00 SEK"},
		{0, "usd", "$0.00"},
	}
	for _, tt := range tests {
		if got := formatMoney(tt.amount, tt.currency); got != tt.want {
			t.Errorf("formatMoney(%d, %s) = %q, want %q", tt.amount, tt.currency, got, tt.want)
		}
	}
}

func TestParseAmount(t *testing.T) {
	tests := []struct {
		in, currency string
		want         int64 // 0: refused
	}{
		{"12.50", "usd", 1250}, {"12.5", "usd", 1250}, {"12", "usd", 1200}, {".5", "usd", 50}, {"1,234.56", "usd", 123456},
		{" 3 ", "usd", 300}, {"500", "jpy", 500}, {"1.234", "kwd", 1234},
		{"1.234", "usd", 0}, {"5.5", "jpy", 0}, {"0", "usd", 0}, {"-1", "usd", 0}, {"1e3", "usd", 0}, {"", "usd", 0},
		{".", "usd", 0}, {"12.", "usd", 1200}, {"99999999999999999", "usd", 0}, {"１２", "usd", 0},
	}
	for _, tt := range tests {
		got, err := parseAmount(tt.in, tt.currency)
		if tt.want == 0 {
			if err == nil || payments.ErrorCode(err) != payments.ValidationError {
				t.Errorf("parseAmount(%q, %s) = %d, %v; want validation_error", tt.in, tt.currency, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseAmount(%q, %s) = %d, %v; want %d", tt.in, tt.currency, got, err, tt.want)
		}
	}
}

func TestCharts(t *testing.T) {
	day := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	days := []payments.DayVolume{
		{Day: day, Currency: "eur", Amount: 0},
		{Day: day.AddDate(0, 0, 1), Currency: "eur", Amount: 1000, Count: 1},
		{Day: day, Currency: "usd", Amount: 4000, Count: 2},
		{Day: day.AddDate(0, 0, 1), Currency: "usd", Amount: 1, Count: 1},
	}
	cs := charts(days)
	if len(cs) != 2 || cs[0].Currency != "EUR" || cs[1].Currency != "USD" {
		t.Fatalf("got %d charts, want EUR then USD", len(cs))
	}
	usd := cs[1]
	if usd.Total != "$40.01" || usd.Max != "$40.00" || len(usd.Bars) != 2 {
		t.Errorf("got USD total %s, peak %s, %d bars; want $40.01, $40.00, 2", usd.Total, usd.Max, len(usd.Bars))
	}
	if b := usd.Bars[0]; b.H != chartHeight-4 || b.Y != 4 {
		t.Errorf("the peak day's bar: got y %.1f, height %.1f; want 4, %d", b.Y, b.H, chartHeight-4)
	}
	if b := usd.Bars[1]; b.H != 1 {
		t.Errorf("a 1-cent day's bar: got height %.1f, want 1 (visible)", b.H)
	}
	if b := cs[0].Bars[0]; b.H != 0 {
		t.Errorf("an empty day's bar: got height %.1f, want 0", b.H)
	}
}
