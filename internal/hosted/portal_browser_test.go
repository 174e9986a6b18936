package hosted_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"paysvc/internal/payments"
	"paysvc/internal/testenv"
)

// TestBrowserPortal: in a real Chromium, the customer sees the
// subscription, a declined card keeps the old one and says so, a saved card
// replaces it (customer.subscription.updated), canceling schedules the end
// of the period, and the return link leads back to the shop.
func TestBrowserPortal(t *testing.T) {
	t.Parallel()
	s := newStack(t, 0)
	sh := newShop(t)
	browser := newBrowser(t)
	ctx := testenv.BrowserStep(t, browser)
	f := s.portal(payments.SubActive, sh.url+"/success?from=portal")

	do(t, ctx, "open the portal", chromedp.Navigate(f.url), chromedp.WaitVisible(chromedp.ID("update-card")))
	for css, want := range map[string]string{
		"#plan": "Pro plan × 2", "#price": "USD 30.00 every month", "#status": "Active", "#card": "Visa •••• 4242",
		"#next-charge": "USD 30.00 on " + f.sub.CurrentPeriodEnd.Format("January 2, 2006"),
	} {
		if got := text(t, ctx, css); got != want {
			t.Errorf("got %s %q, want %q", css, got, want)
		}
	}
	saveScreenshot(t, ctx, "portal.png")

	year := strconv.Itoa(time.Now().Year() + 1)
	do(t, ctx, "type a declined card",
		chromedp.SendKeys(chromedp.ID("card_number"), cardDeclined, chromedp.NodeVisible),
		chromedp.SendKeys(chromedp.ID("exp_month"), "11", chromedp.NodeVisible),
		chromedp.SendKeys(chromedp.ID("exp_year"), year, chromedp.NodeVisible),
		chromedp.SendKeys(chromedp.ID("cvc"), "123", chromedp.NodeVisible),
		chromedp.Click(chromedp.ID("update-card")),
		chromedp.WaitVisible(chromedp.CSS(`[role="alert"]`)))
	if got := text(t, ctx, `[role="alert"]`); !strings.Contains(got, "declined") || !strings.Contains(got, "unchanged") {
		t.Errorf("got alert %q, want a decline that keeps the card", got)
	}
	if got := text(t, ctx, "#card"); got != "Visa •••• 4242" {
		t.Errorf("after the decline got card %q, want the old Visa •••• 4242", got)
	}
	if got := s.subscription(f); got.CardID == nil || *got.CardID != *f.sub.CardID {
		t.Errorf("after the decline got card %v, want %s", got.CardID, *f.sub.CardID)
	}

	do(t, ctx, "type a card that saves",
		chromedp.SendKeys(chromedp.ID("card_number"), "4000 0000 0000 0259", chromedp.NodeVisible),
		chromedp.SendKeys(chromedp.ID("cvc"), "123", chromedp.NodeVisible),
		chromedp.Click(chromedp.ID("update-card")),
		chromedp.WaitVisible(chromedp.ID("notice")))
	if got := text(t, ctx, "#card"); got != "Visa •••• 0259" {
		t.Errorf("after the update got card %q, want Visa •••• 0259", got)
	}
	if got := s.subscription(f); got.CardID == nil || *got.CardID == *f.sub.CardID {
		t.Errorf("after the update got card %v, want a new one", got.CardID)
	}
	var evs struct{ Data []struct{ ID string } }
	s.api("GET", "/v1/events?type=customer.subscription.updated", f.key, nil, &evs)
	if len(evs.Data) != 1 {
		t.Errorf("after the card update got %d customer.subscription.updated, want 1", len(evs.Data))
	}

	do(t, ctx, "cancel", chromedp.Click(chromedp.ID("cancel-subscription")), chromedp.WaitVisible(chromedp.ID("cancel-scheduled")))
	if got := text(t, ctx, "#notice"); !strings.Contains(got, "canceled at the end of the current period") {
		t.Errorf("got notice %q, want the cancellation confirmed", got)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("#cancel-subscription").length`); n != 0 {
		t.Errorf("after canceling the page still offers the cancel button")
	}
	if got := s.subscription(f); !got.CancelAtPeriodEnd || got.Status != payments.SubActive {
		t.Errorf("got %s cancel_at_period_end %v, want active and scheduled", got.Status, got.CancelAtPeriodEnd)
	}
	s.api("GET", "/v1/events?type=customer.subscription.updated", f.key, nil, &evs)
	if len(evs.Data) != 2 {
		t.Errorf("after canceling got %d customer.subscription.updated, want 2", len(evs.Data))
	}

	do(t, ctx, "return to the shop", chromedp.Click(chromedp.ID("return")))
	waitLocation(t, ctx, sh.url+"/success?from=portal")
}
