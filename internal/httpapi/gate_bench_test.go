package httpapi

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/ratelimit"
	"paysvc/internal/secrets"
	"paysvc/internal/testenv"
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

// BenchmarkRoutes runs the bench's three routes (POST_products: POST
// /v1/products; GET_product: GET /v1/products/{id}; GET_products_list: GET
// /v1/products?limit=10 on 1,000 products), the POST with a fresh
// Idempotency-Key each time (POST_products_idempotent) and two more lists
// of ten (GET_customers_list, GET_test_payments_list, on 1,000 each)
// through the whole engine
// (edge, metrics, gate, auth with its 1 s cache, the rate limiter, the
// handler, JSON) on a real PostgreSQL database and a real Redis, as
// bin/api wires them, and reports per request besides ns/op and allocs/op:
//
//	pg-rt/op     round trips to PostgreSQL (client sends after a reply),
//	redis-rt/op  round trips to Redis,
//	wait-ns/op   time spent waiting for a pool connection (sql.DBStats).
//
// Round trips are counted on the wire, by a forwarder between the pools and
// the servers. "serial" is one request at a time; "parallel" runs 32 at once
// (GOMAXPROCS × 16), which is where the pool's wait and the limiter's
// batching show. Run with:
//
//	go test -run '^$' -bench BenchmarkRoutes -benchtime 3s ./internal/httpapi/
func BenchmarkRoutes(b *testing.B) {
	ctx := context.Background()
	pg := testenv.CountRoundTrips(b, testenv.DatabaseURL(b))
	rd := testenv.CountRoundTrips(b, testenv.RedisURL(b))
	db, err := postgres.OpenMode(ctx, pg.URL, 20, testenv.PoolMode(), false)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	ropt, err := redis.ParseURL(rd.URL)
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(ropt)
	b.Cleanup(func() { rdb.Close() })
	store := postgres.New(db)
	bl, err := payments.LoadBlocklist("")
	if err != nil {
		b.Fatal(err)
	}
	box, err := secrets.New(bytes.Repeat([]byte{42}, 32))
	if err != nil {
		b.Fatal(err)
	}
	svc := payments.NewService(store, bl, time.Now, payments.WithSecrets(box), payments.WithSandboxClocks())
	h := New(Deps{Service: svc, Store: store, Limiter: ratelimit.New(rdb, 1_000_000_000), Secrets: box,
		Log: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	m, k := merchantWithKey(b, svc, "Bench")
	// 1,000 products with their prices, as make bench seeds them.
	if _, err := db.ExecContext(ctx, `WITH s AS MATERIALIZED (
		SELECT g, 'prod_b' || g AS pid, 'price_b' || g AS prid, now() - g * interval '1 minute' AS ts
		FROM generate_series(1, 1000) AS g
	), ins AS (
		INSERT INTO products (id, merchant_id, livemode, name, default_price_id, created_at, updated_at)
		SELECT pid, $1, false, 'Seed product ' || g, prid, ts, ts FROM s
	)
	INSERT INTO prices (id, merchant_id, livemode, product_id, amount, currency, created_at)
	SELECT prid, $1, false, pid, 100 + g, 'usd', ts FROM s`, m.ID); err != nil {
		b.Fatal(err)
	}
	// 1,000 customers and 1,000 succeeded test payments, for their lists.
	if _, err := db.ExecContext(ctx, `WITH s AS MATERIALIZED (
		SELECT g, now() - g * interval '1 minute' AS ts FROM generate_series(1, 1000) AS g
	), cus AS (
		INSERT INTO customers (id, merchant_id, livemode, email, name, created_at, updated_at)
		SELECT 'cus_b' || g, $1, false, 'c' || g || '@example.com', 'Customer ' || g, ts, ts FROM s
	)
	INSERT INTO payment_intents (id, merchant_id, livemode, amount, amount_received, currency, status,
		fee_amount, customer_id, description, succeeded_at, created_at, updated_at)
	SELECT 'pi_b' || g, $1, false, 1000 + g, 1000 + g, 'usd', 'succeeded', 59, 'cus_b' || g,
		'Order ' || g, ts, ts, ts FROM s`, m.ID); err != nil {
		b.Fatal(err)
	}
	// Statistics, as make bench takes after its seeds and autovacuum would
	// within a minute. Without them the lists' plans depended on whether
	// autovacuum happened to run during the POSTs: a never-analyzed products
	// table, grown to 9,000 rows by the POSTs, got a bitmap scan that sorted
	// every product for each page (19–28 ms a page, against 0.6 ms).
	if _, err := db.ExecContext(ctx, `ANALYZE products, prices, customers, payment_intents`); err != nil {
		b.Fatal(err)
	}
	auth := "Bearer " + k.Secret
	product := []byte(`{"name":"Bench product","price":{"amount":1999,"currency":"usd"}}`)
	var n atomic.Int64
	routes := []struct {
		name   string
		method string
		path   func() string
		body   []byte
		idem   bool
	}{
		{"POST_products", "POST", func() string { return "/v1/products" }, product, false},
		{"POST_products_idempotent", "POST", func() string { return "/v1/products" }, product, true},
		{"GET_product", "GET", func() string { return "/v1/products/prod_b" + strconv.Itoa(int(n.Add(1)%1000)+1) }, nil, false},
		{"GET_products_list", "GET", func() string { return "/v1/products?limit=10" }, nil, false},
		{"GET_customers_list", "GET", func() string { return "/v1/customers?limit=10" }, nil, false},
		{"GET_test_payments_list", "GET", func() string { return "/v1/test-payments?limit=10" }, nil, false},
	}
	var keys atomic.Int64
	do := func(b *testing.B, method, path string, body []byte, idem bool) {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req := httptest.NewRequest(method, path, rd)
		req.Header.Set("Authorization", auth)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if idem {
			req.Header.Set("Idempotency-Key", "bench-"+strconv.FormatInt(keys.Add(1), 10))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("%s %s: %d %s", method, path, w.Code, w.Body)
		}
	}
	for _, r := range routes {
		for _, mode := range []string{"serial", "parallel"} {
			b.Run(r.name+"/"+mode, func(b *testing.B) {
				for range 50 { // statements prepared, auth cached, pools full
					do(b, r.method, r.path(), r.body, r.idem)
				}
				pg0, rd0, wait0 := pg.Trips(), rd.Trips(), db.Stats().WaitDuration
				b.ReportAllocs()
				b.ResetTimer()
				if mode == "serial" {
					for b.Loop() {
						do(b, r.method, r.path(), r.body, r.idem)
					}
				} else {
					b.SetParallelism(16)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							do(b, r.method, r.path(), r.body, r.idem)
						}
					})
				}
				b.StopTimer()
				ops := float64(b.N)
				b.ReportMetric(float64(pg.Trips()-pg0)/ops, "pg-rt/op")
				b.ReportMetric(float64(rd.Trips()-rd0)/ops, "redis-rt/op")
				b.ReportMetric(float64(db.Stats().WaitDuration-wait0)/ops, "wait-ns/op")
			})
		}
	}
}
