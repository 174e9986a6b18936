package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"paysvc/internal/payments"
)

// subProductView is a subscription product as the API returns it.
type subProductView struct {
	ID              string            `json:"id"`
	Object          string            `json:"object"`
	Name            string            `json:"name"`
	Description     *string           `json:"description"`
	Active          bool              `json:"active"`
	TrialPeriodDays int               `json:"trial_period_days"`
	Metadata        map[string]string `json:"metadata"`
	Price           struct {
		ID            string `json:"id"`
		Object        string `json:"object"`
		Amount        int64  `json:"amount"`
		Currency      string `json:"currency"`
		Interval      string `json:"interval"`
		IntervalCount int    `json:"interval_count"`
	} `json:"price"`
	Livemode bool  `json:"livemode"`
	Created  int64 `json:"created"`
}

func createSubProductOK(t *testing.T, h *harness, key string, body any) subProductView {
	t.Helper()
	r := h.do("POST", "/v1/subscription-products", key, body)
	wantOK(t, r)
	var p subProductView
	r.data(t, &p)
	return p
}

func subProductBody(kv ...any) map[string]any {
	b := map[string]any{"name": "Pro plan", "amount": 1500, "currency": "usd", "interval": "monthly"}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(b, kv[i].(string))
		} else {
			b[kv[i].(string)] = kv[i+1]
		}
	}
	return b
}

func listSubProducts(t *testing.T, h *harness, key, query string) []subProductView {
	t.Helper()
	r := h.do("GET", "/v1/subscription-products?"+query, key, nil)
	wantOK(t, r)
	var page struct {
		Data []subProductView `json:"data"`
	}
	r.data(t, &page)
	return page.Data
}

func TestSubscriptionProductCreate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()

	t.Run("every field", func(t *testing.T) {
		p := createSubProductOK(t, h, key, map[string]any{
			"name": "Team plan", "description": "Seats for a team", "amount": 2500, "currency": "EUR",
			"interval": "bi-monthly", "trial_period_days": 14, "metadata": map[string]string{"tier": "team"},
		})
		if !strings.HasPrefix(p.ID, "prod_") || !strings.HasPrefix(p.Price.ID, "price_") || p.Created == 0 {
			t.Errorf("got id %q, price id %q, created %d; want prod_, price_ and a time", p.ID, p.Price.ID, p.Created)
		}
		want := subProductView{ID: p.ID, Object: "product", Name: "Team plan", Description: ptr("Seats for a team"), Active: true,
			TrialPeriodDays: 14, Metadata: map[string]string{"tier": "team"}, Livemode: false, Created: p.Created}
		want.Price = p.Price
		want.Price.Object, want.Price.Amount, want.Price.Currency, want.Price.Interval, want.Price.IntervalCount = "price", 2500, "eur", "bi-monthly", 1
		wantSameJSON(t, "subscription product", p, want)

		// It is a product: GET /v1/products/{id} reads it, with its price.
		prod := getProductOK(t, h, key, p.ID)
		if prod.Name != "Team plan" || !prod.Active || prod.DefaultPrice == nil || prod.DefaultPrice.ID != p.Price.ID || prod.DefaultPrice.Amount != 2500 {
			t.Errorf("GET /v1/products/%s = %+v, want the same product and price", p.ID, prod)
		}
		var interval string
		var count int
		if err := h.db.QueryRow(`SELECT recurring_interval, recurring_interval_count FROM prices WHERE id = $1`, p.Price.ID).Scan(&interval, &count); err != nil {
			t.Fatal(err)
		}
		if interval != "bi-monthly" || count != 1 {
			t.Errorf("stored interval %s × %d, want bi-monthly × 1", interval, count)
		}
	})

	t.Run("the least: no trial, no description, empty metadata", func(t *testing.T) {
		p := createSubProductOK(t, h, key, subProductBody())
		if p.TrialPeriodDays != 0 || p.Description != nil || p.Metadata == nil || len(p.Metadata) != 0 || !p.Active {
			t.Errorf("got %+v, want trial 0, description null, metadata {}, active", p)
		}
	})

	for _, iv := range []string{"weekly", "bi-weekly", "monthly", "bi-monthly", "quarterly", "semi-annual", "annual"} {
		t.Run("interval "+iv, func(t *testing.T) {
			p := createSubProductOK(t, h, key, subProductBody("interval", iv))
			if p.Price.Interval != iv || p.Price.IntervalCount != 1 {
				t.Errorf("got interval %s × %d, want %s × 1", p.Price.Interval, p.Price.IntervalCount, iv)
			}
		})
	}

	for _, days := range []int{0, 1, 730} {
		t.Run(fmt.Sprintf("trial %d days", days), func(t *testing.T) {
			if p := createSubProductOK(t, h, key, subProductBody("trial_period_days", days)); p.TrialPeriodDays != days {
				t.Errorf("got %d, want %d", p.TrialPeriodDays, days)
			}
		})
	}

	t.Run("replayed with the same Idempotency-Key", func(t *testing.T) {
		m := h.merchant(payments.PlanFree)
		k := h.key(m, false)
		first := h.do("POST", "/v1/subscription-products", k, subProductBody(), "Idempotency-Key", "sp-1")
		again := h.do("POST", "/v1/subscription-products", k, subProductBody(), "Idempotency-Key", "sp-1")
		wantOK(t, first)
		wantOK(t, again)
		if string(first.Body.Data) != string(again.Body.Data) || again.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("got %s then %s (replayed %q), want the same product replayed", first.Body.Data, again.Body.Data, again.Header.Get("Idempotent-Replayed"))
		}
		if n := countRows(t, h, "products", m); n != 1 {
			t.Errorf("got %d products, want 1", n)
		}
	})
}

func TestSubscriptionProductValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	for _, c := range []struct {
		name  string
		body  any
		code  string // validation_error or invalid_interval
		field string
	}{
		{"name missing", subProductBody("name", nil), "validation_error", "name"},
		{"name empty", subProductBody("name", ""), "validation_error", "name"},
		{"name a number", subProductBody("name", 5), "validation_error", "name"},
		{"description too long", subProductBody("description", strings.Repeat("d", 5001)), "validation_error", "description"},
		{"amount missing", subProductBody("amount", nil), "validation_error", "amount"},
		{"amount 0", subProductBody("amount", 0), "validation_error", "amount"},
		{"amount negative", subProductBody("amount", -5), "validation_error", "amount"},
		{"amount too large", subProductBody("amount", 100000000), "validation_error", "amount"},
		{"amount a string", subProductBody("amount", "100"), "validation_error", "amount"},
		{"amount fractional", subProductBody("amount", 10.5), "validation_error", "amount"},
		{"currency missing", subProductBody("currency", nil), "validation_error", "currency"},
		{"currency four letters", subProductBody("currency", "usdd"), "validation_error", "currency"},
		{"currency not ISO 4217", subProductBody("currency", "zzz"), "validation_error", "currency"},
		{"interval missing", subProductBody("interval", nil), "validation_error", "interval"},
		{"interval a number", subProductBody("interval", 1), "validation_error", "interval"},
		{"interval empty", subProductBody("interval", ""), "invalid_interval", "interval"},
		{"interval month (the inline form's unit)", subProductBody("interval", "month"), "invalid_interval", "interval"},
		{"interval day", subProductBody("interval", "day"), "invalid_interval", "interval"},
		{"interval Monthly", subProductBody("interval", "Monthly"), "invalid_interval", "interval"},
		{"interval daily", subProductBody("interval", "daily"), "invalid_interval", "interval"},
		{"interval biweekly", subProductBody("interval", "biweekly"), "invalid_interval", "interval"},
		{"interval yearly", subProductBody("interval", "yearly"), "invalid_interval", "interval"},
		{"interval with spaces", subProductBody("interval", " monthly "), "invalid_interval", "interval"},
		{"interval_count is not a field here", subProductBody("interval_count", 2), "validation_error", "interval_count"},
		{"trial negative", subProductBody("trial_period_days", -1), "validation_error", "trial_period_days"},
		{"trial 731 days", subProductBody("trial_period_days", 731), "validation_error", "trial_period_days"},
		{"trial a string", subProductBody("trial_period_days", "7"), "validation_error", "trial_period_days"},
		{"trial huge", `{"name":"a","amount":1,"currency":"usd","interval":"weekly","trial_period_days":99999999999999999999}`, "validation_error", "trial_period_days"},
		{"metadata 51 keys", subProductBody("metadata", metadataOf(51)), "validation_error", "metadata"},
		{"metadata number value", subProductBody("metadata", map[string]any{"k": 1}), "validation_error", "metadata"},
		{"unknown field", subProductBody("price", map[string]any{"amount": 1}), "validation_error", "price"},
		{"not an object", `[]`, "validation_error", ""},
		{"malformed", `{"name":`, "validation_error", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := h.merchant(payments.PlanFree)
			r := h.do("POST", "/v1/subscription-products", h.key(m, false), c.body)
			wantError(t, r, http.StatusBadRequest, c.code)
			if r.Body.Error != nil && !strings.Contains(r.Body.Error.Message, c.field) {
				t.Errorf("got message %q, want it to name %q", r.Body.Error.Message, c.field)
			}
			if n := countRows(t, h, "products", m); n != 0 {
				t.Errorf("got %d products, want none", n)
			}
		})
	}
}

func TestSubscriptionProductScreening(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{blocklist: screeningBlocklist})
	for _, c := range []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"name", subProductBody("name", "The BadWord plan"), "name"},
		{"description", subProductBody("description", "monthly forbidden...thing"), "description"},
		{"clean", subProductBody("description", "badwords are fine"), ""},
		{"metadata is not screened", subProductBody("metadata", map[string]string{"k": "badword"}), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := h.merchant(payments.PlanFree)
			r := h.do("POST", "/v1/subscription-products", h.key(m, false), c.body)
			if c.field == "" {
				wantOK(t, r)
				if got := violations(t, h, m); len(got) != 0 {
					t.Errorf("got violations %v, want none", got)
				}
				return
			}
			wantError(t, r, http.StatusBadRequest, "prohibited_content")
			if r.Body.Error != nil && !strings.Contains(r.Body.Error.Message, c.field) {
				t.Errorf("got message %q, want it to name %s", r.Body.Error.Message, c.field)
			}
			if got, want := strings.Join(violations(t, h, m), ","), c.field+"/test"; got != want {
				t.Errorf("got violations %q, want %q", got, want)
			}
			if n := countRows(t, h, "products", m); n != 0 {
				t.Errorf("got %d products, want none", n)
			}
		})
	}

	t.Run("five violations suspend the merchant", func(t *testing.T) {
		t.Parallel()
		m := h.merchant(payments.PlanFree)
		key := h.key(m, true)
		for i := range 5 {
			wantError(t, h.do("POST", "/v1/subscription-products", key, subProductBody("name", fmt.Sprintf("badword %d", i))),
				http.StatusBadRequest, "prohibited_content")
		}
		if !suspended(t, h, m) {
			t.Fatal("merchant not suspended after 5 violations")
		}
		wantError(t, h.do("GET", "/v1/subscription-products", key, nil), http.StatusUnauthorized, "key_revoked")
	})

	t.Run("an invalid interval is refused before screening", func(t *testing.T) {
		t.Parallel()
		m := h.merchant(payments.PlanFree)
		wantError(t, h.do("POST", "/v1/subscription-products", h.key(m, false), subProductBody("name", "badword", "interval", "daily")),
			http.StatusBadRequest, "invalid_interval")
		if got := violations(t, h, m); len(got) != 0 {
			t.Errorf("got violations %v for a request refused as invalid, want none", got)
		}
	})
}

// TestSubscriptionProductList: only subscription products, archived ones
// included, newest first, each scope its own. Paging is covered with the
// other lists by TestListPagination.
func TestSubscriptionProductList(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	mA := h.merchant(payments.PlanFree)
	aTest, aLive := h.key(mA, false), h.key(mA, true)
	bTest := h.testKey()

	oneTime := createProductOK(t, h, aTest, map[string]any{"name": "Mug", "price": map[string]any{"amount": 900, "currency": "usd"}})
	var ids []string
	for i := range 3 {
		ids = append(ids, createSubProductOK(t, h, aTest, subProductBody("name", fmt.Sprintf("Plan %d", i))).ID)
	}
	liveID := createSubProductOK(t, h, aLive, subProductBody()).ID
	bID := createSubProductOK(t, h, bTest, subProductBody()).ID
	wantOK(t, h.do("DELETE", "/v1/products/"+ids[0], aTest, nil))

	got := listSubProducts(t, h, aTest, "")
	var gotIDs []string
	for _, p := range got {
		gotIDs = append(gotIDs, p.ID)
	}
	if want := reversed(ids); !slices.Equal(gotIDs, want) {
		t.Fatalf("got %v, want A's test-mode subscription products newest first %v (no one-time product %s, no %s or %s)",
			gotIDs, want, oneTime.ID, liveID, bID)
	}
	if got[2].Active || !got[1].Active {
		t.Errorf("got active %v, %v; want the archived one listed with active false", got[2].Active, got[1].Active)
	}
	if live := listSubProducts(t, h, aLive, ""); len(live) != 1 || live[0].ID != liveID || !live[0].Livemode {
		t.Errorf("live mode lists %+v, want only %s", live, liveID)
	}
	if b := listSubProducts(t, h, bTest, ""); len(b) != 1 || b[0].ID != bID {
		t.Errorf("merchant B lists %+v, want only %s", b, bID)
	}
	// The one-time product list shows every product, subscription ones too.
	if all, _ := listPage(t, h, aTest, "/v1/products", "limit=100"); len(all) != 4 {
		t.Errorf("GET /v1/products lists %d products, want 4 (3 subscription, 1 one-time)", len(all))
	}
	for name, id := range map[string]string{"a one-time product": oneTime.ID, "another merchant's": bID, "the other mode's": liveID} {
		t.Run("starting_after "+name, func(t *testing.T) {
			wantValidation(t, h.do("GET", "/v1/subscription-products?starting_after="+id, aTest, nil), "starting_after")
		})
	}
	if after := listSubProducts(t, h, aTest, "limit=1&starting_after="+ids[2]); len(after) != 1 || after[0].ID != ids[1] {
		t.Errorf("after %s: got %+v, want %s", ids[2], after, ids[1])
	}
}

// TestSubscriptionProductAsProduct: archiving through the products API stops
// its sale; its price cannot be replaced; a one-time session refuses it; and
// another scope cannot touch it.
func TestSubscriptionProductAsProduct(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	ctx := context.Background()
	mA := h.merchant(payments.PlanFree)
	aTest := h.key(mA, false)
	scA := payments.Scope{MerchantID: mA}
	p := createSubProductOK(t, h, aTest, subProductBody("interval", "quarterly", "trial_period_days", 7))

	sp, err := h.store.RecurringPriceForSale(ctx, scA, p.Price.ID)
	if err != nil || sp.ID != p.ID || sp.Price.Interval != (payments.Interval{Name: "quarterly", Count: 1}) || sp.TrialPeriodDays != 7 || sp.Price.Amount != 1500 {
		t.Fatalf("RecurringPriceForSale = %+v, %v; want the product, quarterly, 7 trial days", sp, err)
	}
	for name, sc := range map[string]payments.Scope{"live mode": {MerchantID: mA, Live: true}, "another merchant": {MerchantID: h.merchant(payments.PlanFree)}} {
		if _, err := h.store.RecurringPriceForSale(ctx, sc, p.Price.ID); payments.ErrorCode(err) != payments.ProductNotFound {
			t.Errorf("%s: RecurringPriceForSale = %v, want product_not_found", name, err)
		}
	}
	oneTime := createProductOK(t, h, aTest, map[string]any{"name": "Mug", "price": map[string]any{"amount": 900, "currency": "usd"}})
	if _, err := h.store.RecurringPriceForSale(ctx, scA, oneTime.DefaultPrice.ID); payments.ErrorCode(err) != payments.ProductNotFound {
		t.Errorf("a one-time price: RecurringPriceForSale = %v, want product_not_found", err)
	}

	t.Run("a one-time session refuses a recurring price", func(t *testing.T) {
		r := h.do("POST", "/v1/payment-sessions", aTest, sessionBody([]map[string]any{{"price_id": p.Price.ID, "quantity": 1}}))
		wantValidation(t, r, "price_id")
	})
	t.Run("its price cannot be replaced", func(t *testing.T) {
		wantValidation(t, h.do("PUT", "/v1/products/"+p.ID, aTest, map[string]any{"price": map[string]any{"amount": 1, "currency": "usd"}}), "price")
		if got := listSubProducts(t, h, aTest, ""); len(got) != 1 || got[0].Price.ID != p.Price.ID || got[0].Price.Amount != 1500 {
			t.Errorf("got %+v, want the price unchanged", got)
		}
	})
	t.Run("its name can change", func(t *testing.T) {
		wantOK(t, h.do("PUT", "/v1/products/"+p.ID, aTest, map[string]any{"name": "Quarterly plan"}))
		if got := listSubProducts(t, h, aTest, ""); len(got) != 1 || got[0].Name != "Quarterly plan" || got[0].Price.Interval != "quarterly" {
			t.Errorf("got %+v, want the new name and the same price", got)
		}
	})
	t.Run("another merchant or mode cannot archive it", func(t *testing.T) {
		wantError(t, h.do("DELETE", "/v1/products/"+p.ID, h.testKey(), nil), http.StatusNotFound, "product_not_found")
		wantError(t, h.do("DELETE", "/v1/products/"+p.ID, h.key(mA, true), nil), http.StatusNotFound, "product_not_found")
		if _, err := h.store.RecurringPriceForSale(ctx, scA, p.Price.ID); err != nil {
			t.Errorf("still for sale: got %v", err)
		}
	})
	t.Run("archived, it cannot be sold", func(t *testing.T) {
		wantOK(t, h.do("DELETE", "/v1/products/"+p.ID, aTest, nil))
		if _, err := h.store.RecurringPriceForSale(ctx, scA, p.Price.ID); payments.ErrorCode(err) != payments.ProductNotFound {
			t.Errorf("RecurringPriceForSale of an archived product = %v, want product_not_found", err)
		}
		if got := listSubProducts(t, h, aTest, ""); len(got) != 1 || got[0].Active {
			t.Errorf("got %+v, want it listed with active false", got)
		}
	})
}
