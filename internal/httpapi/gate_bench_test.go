package httpapi

import (
	"bytes"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
)

// BenchmarkGate measures what the client-text gate adds to a request: a
// product create with a query, the headers it reads and a JSON body, on an
// engine that does nothing else, with the gate and without.
func BenchmarkGate(b *testing.B) {
	body := []byte(`{"name":"T-shirt","description":"Organic cotton, ümlaut","metadata":{"sku":"ts-1","colour":"blue"},` +
		`"images":["https://img.example/a.png"],"price":{"amount":1999,"currency":"usd"}}`)
	s := &Server{}
	gin.SetMode(gin.ReleaseMode)
	for _, c := range []struct {
		name string
		mw   []gin.HandlerFunc
	}{{"without", nil}, {"with", []gin.HandlerFunc{s.gate}}} {
		b.Run(c.name, func(b *testing.B) {
			r := gin.New()
			r.Use(c.mw...)
			r.POST("/v1/products/:id", func(c *gin.Context) {
				if _, err := readBody(c); err != nil {
					b.Fatal(err)
				}
				c.Status(200)
			})
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest("POST", "/v1/products/prod_x?limit=10&starting_after=prod_y", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer svc_test_0123456789")
				req.Header.Set("Idempotency-Key", "order-42")
				req.Header.Set("Content-Type", "application/json")
				r.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
	}
}
