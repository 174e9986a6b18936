package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// series returns the metric of family name whose labels are exactly want,
// from the process's registry (where the API's metrics live), or nil.
func series(t *testing.T, name string, want map[string]string) *dto.Metric {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(want) {
				continue
			}
			for _, l := range m.GetLabel() {
				if want[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

// labelValues are every value label takes in family name.
func labelValues(t *testing.T, name, label string) map[string]bool {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]bool{}
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == label {
						vals[l.GetValue()] = true
					}
				}
			}
		}
	}
	return vals
}

// Requests are counted by method, route template and status, and timed by
// method and route: each answer in its own status's series, an id never a
// label value, and a method no route has never one either (an unmatched
// request's method is "other" unless HTTP defines it). Other tests of the
// package count in the same series meanwhile, so the counts are checked
// as at least what this test sent.
func TestRequestMetricsByRouteTemplate(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	key := h.testKey()
	created := h.do("POST", "/v1/products", key, map[string]any{"name": "Counted", "price": map[string]any{"amount": 500, "currency": "usd"}})
	if created.Status != 200 {
		t.Fatalf("create: %d %s", created.Status, created.Raw)
	}
	var p struct{ ID string }
	created.data(t, &p)

	count := func(method, route, status string) float64 {
		m := series(t, "paysvc_http_requests_total", map[string]string{"method": method, "route": route, "status": status})
		if m == nil {
			return 0
		}
		return m.GetCounter().GetValue()
	}
	timed := func(method, route string) uint64 {
		m := series(t, "paysvc_http_request_duration_seconds", map[string]string{"method": method, "route": route})
		if m == nil {
			return 0
		}
		return m.GetHistogram().GetSampleCount()
	}
	const route = "/v1/products/:id"
	ok0, missing0, timed0 := count("GET", route, "200"), count("GET", route, "404"), timed("GET", route)
	other0 := count("other", "unmatched", "404")
	// Two methods of one route are two series.
	listed0, posted0 := count("GET", "/v1/products", "200"), count("POST", "/v1/products", "200")
	if r := h.do("GET", "/v1/products", key, nil); r.Status != 200 {
		t.Fatalf("list: %d %s", r.Status, r.Raw)
	}
	if r := h.do("POST", "/v1/products", key, map[string]any{"name": "Counted too"}); r.Status != 200 {
		t.Fatalf("create: %d %s", r.Status, r.Raw)
	}

	for range 3 {
		if r := h.do("GET", "/v1/products/"+p.ID, key, nil); r.Status != 200 {
			t.Fatalf("get: %d %s", r.Status, r.Raw)
		}
	}
	for range 2 {
		if r := h.do("GET", "/v1/products/prod_missing", key, nil); r.Status != 404 {
			t.Fatalf("get missing: %d %s", r.Status, r.Raw)
		}
	}
	req, err := http.NewRequest("PAYSVCTEST", h.url+"/v1/products", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("unknown method: %d", resp.StatusCode)
	}

	if d := count("GET", route, "200") - ok0; d < 3 {
		t.Errorf("GET %s 200: counted %v more, sent 3", route, d)
	}
	if d := count("GET", route, "404") - missing0; d < 2 {
		t.Errorf("GET %s 404: counted %v more, sent 2", route, d)
	}
	if d := timed("GET", route) - timed0; d < 5 {
		t.Errorf("GET %s: timed %d more, sent 5", route, d)
	}
	if d := count("other", "unmatched", "404") - other0; d < 1 {
		t.Errorf("unknown method: counted %v more as other/unmatched, sent 1", d)
	}
	if d := count("GET", "/v1/products", "200") - listed0; d < 1 {
		t.Errorf("GET /v1/products 200: counted %v more, sent 1", d)
	}
	if d := count("POST", "/v1/products", "200") - posted0; d < 1 {
		t.Errorf("POST /v1/products 200: counted %v more, sent 1", d)
	}
	if labelValues(t, "paysvc_http_requests_total", "method")["PAYSVCTEST"] {
		t.Error("a client's method became a label value")
	}
	for r := range labelValues(t, "paysvc_http_requests_total", "route") {
		if r == "/v1/products/"+p.ID || r == "/v1/products/prod_missing" {
			t.Errorf("an id became a route label: %s", r)
		}
	}
}
