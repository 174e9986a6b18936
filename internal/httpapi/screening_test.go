package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"paysvc/internal/payments"
)

const screeningBlocklist = "forbidden thing\nbadword"

// violations returns the fields of a merchant's stored content violations,
// oldest first, with their mode.
func violations(t *testing.T, h *harness, merchantID string) []string {
	t.Helper()
	var rows []struct {
		Field    string `db:"field"`
		Livemode bool   `db:"livemode"`
	}
	if err := h.db.SelectContext(context.Background(), &rows,
		`SELECT field, livemode FROM content_violations WHERE merchant_id = $1 ORDER BY id`, merchantID); err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		mode := "test"
		if r.Livemode {
			mode = "live"
		}
		out = append(out, r.Field+"/"+mode)
	}
	return out
}

func suspended(t *testing.T, h *harness, merchantID string) bool {
	t.Helper()
	var at *time.Time
	if err := h.db.GetContext(context.Background(), &at, `SELECT suspended_at FROM merchants WHERE id = $1`, merchantID); err != nil {
		t.Fatal(err)
	}
	return at != nil
}

func TestScreeningCreate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{blocklist: screeningBlocklist})

	for _, c := range []struct {
		name  string
		body  map[string]any
		field string // "" = accepted
	}{
		{"name exact", map[string]any{"name": "badword"}, "name"},
		{"name mixed case", map[string]any{"name": "BadWord"}, "name"},
		{"name in a sentence", map[string]any{"name": "Buy the BADWORD now"}, "name"},
		{"name with punctuation", map[string]any{"name": "¡(BadWord)!"}, "name"},
		{"name with quotes and comma", map[string]any{"name": `"badword", said he`}, "name"},
		{"name hyphenated", map[string]any{"name": "super-badword-deal"}, "name"},
		{"name at a line end", map[string]any{"name": "first line\nbadword\n"}, "name"},
		{"description", map[string]any{"name": "Fine", "description": "Contains BadWord."}, "description"},
		{"description two-word term", map[string]any{"name": "Fine", "description": "A Forbidden Thing for sale"}, "description"},
		{"description two-word term across punctuation", map[string]any{"name": "Fine", "description": "forbidden...\n\tTHING"}, "description"},
		{"plural is another word", map[string]any{"name": "badwords"}, ""},
		{"prefix is another word", map[string]any{"name": "abadword"}, ""},
		{"suffix digits are another word", map[string]any{"name": "badword2"}, ""},
		{"split term", map[string]any{"name": "bad word"}, ""},
		{"two-word term joined", map[string]any{"name": "Fine", "description": "forbiddenthing"}, ""},
		{"two-word term plural", map[string]any{"name": "Fine", "description": "forbidden things"}, ""},
		{"two-word term reversed", map[string]any{"name": "Fine", "description": "thing forbidden"}, ""},
		{"term in metadata is not screened", map[string]any{"name": "Fine", "metadata": map[string]string{"note": "badword"}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := h.merchant(payments.PlanFree)
			key := h.key(m, false)
			r := h.do("POST", "/v1/products", key, c.body)
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
			if got := countRows(t, h, "products", m); got != 0 {
				t.Errorf("got %d products, want 0", got)
			}
			if got, want := strings.Join(violations(t, h, m), ","), c.field+"/test"; got != want {
				t.Errorf("got violations %q, want %q", got, want)
			}
		})
	}
}

func TestScreeningUpdate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{blocklist: screeningBlocklist})
	m := h.merchant(payments.PlanFree)
	key := h.key(m, true)
	r := h.do("POST", "/v1/products", key, map[string]any{"name": "Clean", "description": "Clean too"})
	wantOK(t, r)
	id := productID(t, r)

	for _, c := range []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"name", map[string]any{"name": "Now with BADWORD"}, "name"},
		{"description", map[string]any{"description": "forbidden thing!"}, "description"},
		{"description with a clean name", map[string]any{"name": "Clean", "description": "badword"}, "description"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := h.do("PUT", "/v1/products/"+id, key, c.body)
			wantError(t, r, http.StatusBadRequest, "prohibited_content")
			if r.Body.Error != nil && !strings.Contains(r.Body.Error.Message, c.field) {
				t.Errorf("got message %q, want it to name %s", r.Body.Error.Message, c.field)
			}
		})
	}
	r = h.do("GET", "/v1/products/"+id, key, nil)
	wantOK(t, r)
	var p struct {
		Name        string
		Description *string
	}
	r.data(t, &p)
	if p.Name != "Clean" || p.Description == nil || *p.Description != "Clean too" {
		t.Errorf("got %+v after refused updates, want the original name and description", p)
	}
	if got, want := strings.Join(violations(t, h, m), ","), "name/live,description/live,description/live"; got != want {
		t.Errorf("got violations %q, want %q", got, want)
	}
	// A clean update still works.
	wantOK(t, h.do("PUT", "/v1/products/"+id, key, map[string]any{"name": "Cleaner"}))
}

func TestScreeningSuspension(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOpts{blocklist: screeningBlocklist})

	t.Run("four violations do not suspend", func(t *testing.T) {
		t.Parallel()
		m := h.merchant(payments.PlanFree)
		test, live := h.key(m, false), h.key(m, true)
		for _, k := range []string{test, live, test, live} {
			h.violate(k)
		}
		if suspended(t, h, m) {
			t.Fatalf("merchant suspended after 4 violations")
		}
		wantOK(t, h.do("POST", "/v1/products", test, productBody))
		wantOK(t, h.do("GET", "/v1/products", live, nil))
		if got := len(violations(t, h, m)); got != 4 {
			t.Errorf("got %d violations, want 4", got)
		}
	})

	t.Run("the fifth suspends, across modes", func(t *testing.T) {
		t.Parallel()
		m := h.merchant(payments.PlanFree)
		test, live := h.key(m, false), h.key(m, true)
		for _, k := range []string{test, live, test, live} {
			h.violate(k)
		}
		wantOK(t, h.do("GET", "/v1/products", test, nil))
		h.violate(test)
		if !suspended(t, h, m) {
			t.Errorf("merchant not suspended after 5 violations")
		}
		for _, c := range []struct{ name, method, key string }{
			{"test key GET", "GET", test}, {"test key POST", "POST", test},
			{"live key GET", "GET", live}, {"live key POST", "POST", live},
		} {
			t.Run(c.name, func(t *testing.T) {
				var body any
				if c.method == "POST" {
					body = productBody
				}
				wantError(t, h.do(c.method, "/v1/products", c.key, body), http.StatusUnauthorized, "key_revoked")
			})
		}
		if got, want := strings.Join(violations(t, h, m), ","), "name/test,name/live,name/test,name/live,name/test"; got != want {
			t.Errorf("got violations %q, want %q", got, want)
		}
	})

	t.Run("updates count too", func(t *testing.T) {
		t.Parallel()
		m := h.merchant(payments.PlanFree)
		key := h.key(m, false)
		r := h.do("POST", "/v1/products", key, productBody)
		wantOK(t, r)
		id := productID(t, r)
		for range 5 {
			r := h.do("PUT", "/v1/products/"+id, key, map[string]any{"description": "badword"})
			wantError(t, r, http.StatusBadRequest, "prohibited_content")
		}
		wantError(t, h.do("GET", "/v1/products/"+id, key, nil), http.StatusUnauthorized, "key_revoked")
	})

	t.Run("violations older than 24 hours do not count", func(t *testing.T) {
		t.Parallel()
		m := h.merchant(payments.PlanFree)
		key := h.key(m, false)
		if _, err := h.db.ExecContext(context.Background(),
			`INSERT INTO content_violations (merchant_id, livemode, field, created_at)
			SELECT $1, false, 'name', now() - interval '25 hours' FROM generate_series(1, 4)`, m); err != nil {
			t.Fatal(err)
		}
		h.violate(key)
		wantOK(t, h.do("GET", "/v1/products", key, nil))
		for range 3 {
			h.violate(key)
		}
		wantOK(t, h.do("GET", "/v1/products", key, nil))
		h.violate(key) // the fifth within 24 hours
		wantError(t, h.do("GET", "/v1/products", key, nil), http.StatusUnauthorized, "key_revoked")
	})
}
