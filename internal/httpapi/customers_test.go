package httpapi_test

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"paysvc/internal/payments"
)

// customerView is a customer as the API returns it.
type customerView struct {
	ID       string            `json:"id"`
	Email    *string           `json:"email"`
	Name     *string           `json:"name"`
	Phone    *string           `json:"phone"`
	Metadata map[string]string `json:"metadata"`
	Livemode bool              `json:"livemode"`
	Created  int64             `json:"created"`
}

// createCustomerOK creates a customer and returns it; anything but 200 fails the test.
func createCustomerOK(t *testing.T, h *harness, key string, body any) customerView {
	t.Helper()
	r := h.do("POST", "/v1/customers", key, body)
	wantOK(t, r)
	var c customerView
	r.data(t, &c)
	return c
}

// getCustomerOK reads a customer; anything but 200 fails the test.
func getCustomerOK(t *testing.T, h *harness, key, id string) customerView {
	t.Helper()
	r := h.do("GET", "/v1/customers/"+id, key, nil)
	wantOK(t, r)
	var c customerView
	r.data(t, &c)
	return c
}

func fullCustomerBody() map[string]any {
	return map[string]any{
		"email": "ada@example.com", "name": "Ada Lovelace", "phone": "+44 20 7946 0000",
		"metadata": map[string]string{"crm": "c-1", "tier": "gold"},
	}
}

func TestCustomerCreateValidation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	for _, c := range []struct {
		name  string
		body  any
		field string
	}{
		{"email missing", map[string]any{"name": "Ada"}, "email"},
		{"email missing, empty body", map[string]any{}, "email"},
		{"email null", `{"email": null}`, "email"},
		{"email empty", map[string]any{"email": ""}, "email"},
		{"email not-an-email", map[string]any{"email": "not-an-email"}, "email"},
		{"email a@b", map[string]any{"email": "a@b"}, "email"},
		{"email without local part", map[string]any{"email": "@example.com"}, "email"},
		{"email with display name", map[string]any{"email": "Ada <ada@example.com>"}, "email"},
		{"email number", map[string]any{"email": 5}, "email"},
		{"name number", map[string]any{"email": "a@example.com", "name": 5}, "name"},
		{"phone bool", map[string]any{"email": "a@example.com", "phone": true}, "phone"},
		{"metadata number value", map[string]any{"email": "a@example.com", "metadata": map[string]any{"n": 1}}, "metadata"},
		{"metadata 51 keys", map[string]any{"email": "a@example.com", "metadata": metadataOf(51)}, "metadata"},
		{"metadata key 41", map[string]any{"email": "a@example.com", "metadata": map[string]string{strings.Repeat("k", 41): "v"}}, "metadata"},
		{"unknown field", map[string]any{"email": "a@example.com", "address": "London"}, "address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantValidation(t, h.do("POST", "/v1/customers", key, c.body), c.field)
		})
	}
	t.Run("nothing was created", func(t *testing.T) {
		items, _ := listPage(t, h, key, "/v1/customers", "limit=100")
		if len(items) != 0 {
			t.Errorf("got %d customers after rejected creates, want 0", len(items))
		}
	})
}

func TestCustomerCreate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()

	t.Run("email only: every field present, null when unset", func(t *testing.T) {
		r := h.do("POST", "/v1/customers", key, map[string]any{"email": "bob@example.com"})
		wantOK(t, r)
		var raw map[string]json.RawMessage
		r.data(t, &raw)
		var keys []string
		for k := range raw {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if got, want := strings.Join(keys, ","), "created,email,id,livemode,metadata,name,phone"; got != want {
			t.Errorf("got fields %s, want %s", got, want)
		}
		for field, want := range map[string]string{
			"email": `"bob@example.com"`, "name": "null", "phone": "null", "metadata": "{}", "livemode": "false",
		} {
			if got := string(raw[field]); got != want {
				t.Errorf("%s: got %s, want %s", field, got, want)
			}
		}
		var c customerView
		r.data(t, &c)
		if !strings.HasPrefix(c.ID, "cus_") || len(c.ID) < len("cus_")+20 {
			t.Errorf("got id %q, want cus_ and at least 20 characters", c.ID)
		}
		wantSameJSON(t, "GET after create", getCustomerOK(t, h, key, c.ID), c)
	})

	t.Run("all fields", func(t *testing.T) {
		before := time.Now().Unix()
		c := createCustomerOK(t, h, key, fullCustomerBody())
		after := time.Now().Unix()
		if c.Created < before || c.Created > after {
			t.Errorf("got created %d, want between %d and %d", c.Created, before, after)
		}
		want := customerView{
			ID: c.ID, Email: ptr("ada@example.com"), Name: ptr("Ada Lovelace"), Phone: ptr("+44 20 7946 0000"),
			Metadata: map[string]string{"crm": "c-1", "tier": "gold"}, Created: c.Created,
		}
		wantSameJSON(t, "created customer", c, want)
		wantSameJSON(t, "GET customer", getCustomerOK(t, h, key, c.ID), want)
	})

	t.Run("same email twice makes two customers", func(t *testing.T) {
		a := createCustomerOK(t, h, key, map[string]any{"email": "twice@example.com"})
		b := createCustomerOK(t, h, key, map[string]any{"email": "twice@example.com"})
		if a.ID == b.ID {
			t.Errorf("got the same id %s twice, want two customers", a.ID)
		}
	})
}

func TestCustomerUpdate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	for _, c := range []struct {
		name   string
		body   any
		change func(c *customerView)
	}{
		{"empty body changes nothing", map[string]any{}, func(c *customerView) {}},
		{"name only", map[string]any{"name": "Ada King"}, func(c *customerView) { c.Name = ptr("Ada King") }},
		{"email only", map[string]any{"email": "countess@example.org"}, func(c *customerView) { c.Email = ptr("countess@example.org") }},
		{"phone cleared by empty string", map[string]any{"phone": ""}, func(c *customerView) { c.Phone = nil }},
		{"name cleared by empty string", map[string]any{"name": ""}, func(c *customerView) { c.Name = nil }},
		{"metadata merged, empty value removes key", map[string]any{"metadata": map[string]string{"tier": "", "region": "eu"}}, func(c *customerView) {
			c.Metadata = map[string]string{"crm": "c-1", "region": "eu"}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			orig := createCustomerOK(t, h, key, fullCustomerBody())
			want := orig
			want.Metadata = map[string]string{}
			for k, v := range orig.Metadata {
				want.Metadata[k] = v
			}
			c.change(&want)
			r := h.do("PUT", "/v1/customers/"+orig.ID, key, c.body)
			wantOK(t, r)
			var got customerView
			r.data(t, &got)
			wantSameJSON(t, "PUT response", got, want)
			wantSameJSON(t, "GET after PUT", getCustomerOK(t, h, key, orig.ID), want)
		})
	}

	t.Run("validation", func(t *testing.T) {
		orig := createCustomerOK(t, h, key, fullCustomerBody())
		for _, c := range []struct {
			name  string
			body  any
			field string
		}{
			{"email not-an-email", map[string]any{"email": "not-an-email"}, "email"},
			{"email a@b", map[string]any{"email": "a@b"}, "email"},
			{"email empty", map[string]any{"email": ""}, "email"},
			{"name number", map[string]any{"name": 1}, "name"},
			{"metadata number value", map[string]any{"metadata": map[string]any{"n": 1}}, "metadata"},
			{"metadata merge would make 51 keys", map[string]any{"metadata": metadataOf(49)}, "metadata"},
			{"unknown field", map[string]any{"address": "x"}, "address"},
		} {
			t.Run(c.name, func(t *testing.T) {
				wantValidation(t, h.do("PUT", "/v1/customers/"+orig.ID, key, c.body), c.field)
			})
		}
		wantSameJSON(t, "customer after rejected updates", getCustomerOK(t, h, key, orig.ID), orig)
	})
}

func TestCustomerDelete(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	keep := createCustomerOK(t, h, key, map[string]any{"email": "keep@example.com"})
	gone := createCustomerOK(t, h, key, fullCustomerBody())

	r := h.do("DELETE", "/v1/customers/"+gone.ID, key, nil)
	wantOK(t, r)
	var deleted map[string]any
	r.data(t, &deleted)
	wantSameJSON(t, "DELETE data", deleted, map[string]any{"id": gone.ID, "deleted": true})

	for _, m := range []struct {
		method string
		body   any
	}{{"GET", nil}, {"PUT", map[string]any{"name": "Back"}}, {"DELETE", nil}} {
		t.Run(m.method+" after delete", func(t *testing.T) {
			wantError(t, h.do(m.method, "/v1/customers/"+gone.ID, key, m.body), http.StatusNotFound, "customer_not_found")
		})
	}
	t.Run("gone from the list", func(t *testing.T) {
		items, hasMore := listPage(t, h, key, "/v1/customers", "limit=100")
		if len(items) != 1 || items[0].ID != keep.ID || hasMore {
			t.Errorf("got list %+v (has_more %v), want only %s", items, hasMore, keep.ID)
		}
	})
	t.Run("others untouched", func(t *testing.T) {
		wantSameJSON(t, "other customer", getCustomerOK(t, h, key, keep.ID), keep)
	})
}

func TestCustomerNotFound(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	p := createProductOK(t, h, key, map[string]any{"name": "P"})
	for _, id := range []string{"cus_doesnotexist00000000000", "nope", p.ID} {
		for _, m := range []struct {
			method string
			body   any
		}{{"GET", nil}, {"PUT", map[string]any{"name": "X"}}, {"DELETE", nil}} {
			t.Run(m.method+" "+id, func(t *testing.T) {
				wantError(t, h.do(m.method, "/v1/customers/"+id, key, m.body), http.StatusNotFound, "customer_not_found")
			})
		}
	}
}

// TestCustomerIsolation: a customer belongs to one merchant and one mode.
func TestCustomerIsolation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{})
	mA, mB := h.merchant(payments.PlanFree), h.merchant(payments.PlanBrand)
	aTest, aLive := h.key(mA, false), h.key(mA, true)
	bTest, bLive := h.key(mB, false), h.key(mB, true)

	testCus := createCustomerOK(t, h, aTest, fullCustomerBody())
	liveCus := createCustomerOK(t, h, aLive, fullCustomerBody())
	if testCus.Livemode || !liveCus.Livemode {
		t.Fatalf("got livemode %v (test key) and %v (live key), want false and true", testCus.Livemode, liveCus.Livemode)
	}

	for _, c := range []struct {
		name, owner, other, id string
	}{
		{"test customer with A's live key", aTest, aLive, testCus.ID},
		{"test customer with B's test key", aTest, bTest, testCus.ID},
		{"test customer with B's live key", aTest, bLive, testCus.ID},
		{"live customer with A's test key", aLive, aTest, liveCus.ID},
		{"live customer with B's live key", aLive, bLive, liveCus.ID},
		{"live customer with B's test key", aLive, bTest, liveCus.ID},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := getCustomerOK(t, h, c.owner, c.id)
			wantError(t, h.do("GET", "/v1/customers/"+c.id, c.other, nil), http.StatusNotFound, "customer_not_found")
			wantError(t, h.do("PUT", "/v1/customers/"+c.id, c.other, map[string]any{"email": "thief@example.com"}),
				http.StatusNotFound, "customer_not_found")
			wantError(t, h.do("DELETE", "/v1/customers/"+c.id, c.other, nil), http.StatusNotFound, "customer_not_found")
			wantSameJSON(t, "owner's view", getCustomerOK(t, h, c.owner, c.id), before)
		})
	}

	t.Run("lists", func(t *testing.T) {
		for _, c := range []struct {
			name, key string
			want      []string
			livemode  bool
		}{
			{"A test", aTest, []string{testCus.ID}, false},
			{"A live", aLive, []string{liveCus.ID}, true},
			{"B test", bTest, nil, false},
			{"B live", bLive, nil, true},
		} {
			items, hasMore := listPage(t, h, c.key, "/v1/customers", "limit=100")
			var ids []string
			for _, it := range items {
				ids = append(ids, it.ID)
				if it.Livemode != c.livemode {
					t.Errorf("%s list: %s has livemode %v, want %v", c.name, it.ID, it.Livemode, c.livemode)
				}
			}
			if strings.Join(ids, ",") != strings.Join(c.want, ",") || hasMore {
				t.Errorf("%s list: got %v (has_more %v), want %v", c.name, ids, hasMore, c.want)
			}
		}
	})
}
