// Command barehandler is the floor the API's GET /v1/products/{id} is
// measured against (issue 17: "full API requests at bare-handler cost"): a
// Gin engine with that one route and no middleware at all (no request id,
// headers, metrics, gate, authentication, rate limit or error envelope
// beyond a 404), reading the product of one merchant named on the command
// line and writing it as the API's success envelope with encoding/json.
// The bench runs it beside the API on the same database and load, so the
// API's ratio to it is what the API's own work costs.
//
// -read store reads through postgres.Store.Product, as the API does
// (concurrent reads share one statement); -read plain runs one prepared
// single-row SELECT per request, as a first handler would.
//
// It serves the bench only: no key is checked, so it listens on loopback.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18090", "listen address (loopback)")
	merchant := flag.String("merchant", "", "the merchant whose test-mode products are read")
	read := flag.String("read", "store", "store: postgres.Store.Product, as the API; plain: one prepared SELECT per request")
	conns := flag.Int("db-conns", 20, "PostgreSQL connections (the API's default pool)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *merchant == "" || (*read != "store" && *read != "plain") {
		flag.Usage()
		os.Exit(2)
	}
	host, _, err := net.SplitHostPort(*addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		log.Fatalf("barehandler: -addr %q is not a loopback address", *addr)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	ctx := context.Background()
	db, err := postgres.Open(ctx, os.Getenv("DATABASE_URL"), *conns)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	sc := payments.Scope{MerchantID: *merchant}

	get := postgres.New(db).Product
	if *read == "plain" {
		stmt, err := db.PrepareContext(ctx, `SELECT p.id, p.name, p.active, p.created_at, dp.id, dp.amount, dp.currency
			FROM products p LEFT JOIN prices dp ON dp.id = p.default_price_id
			WHERE p.merchant_id = $1 AND p.livemode = $2 AND p.id = $3`)
		if err != nil {
			log.Fatal(err)
		}
		get = func(ctx context.Context, sc payments.Scope, id string) (payments.Product, error) {
			var p payments.Product
			var priceID, currency sql.NullString
			var amount sql.NullInt64
			err := stmt.QueryRowContext(ctx, sc.MerchantID, sc.Live, id).Scan(&p.ID, &p.Name, &p.Active, &p.Created, &priceID, &amount, &currency)
			if errors.Is(err, sql.ErrNoRows) {
				return p, payments.NotFound(payments.ProductNotFound, id)
			}
			if priceID.Valid {
				p.DefaultPrice = &payments.Price{ID: priceID.String, ProductID: p.ID, Amount: amount.Int64, Currency: currency.String}
			}
			return p, err
		}
	}

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.GET("/v1/products/:id", func(c *gin.Context) {
		p, err := get(c.Request.Context(), sc, c.Param("id"))
		if err != nil {
			c.Data(http.StatusNotFound, "application/json; charset=utf-8", []byte(`{"error":{"code":"product_not_found"}}`))
			return
		}
		b, _ := json.Marshal(struct {
			Success bool   `json:"success"`
			Data    any    `json:"data"`
			ID      string `json:"request_id"`
		}{true, p.Object(), ""})
		c.Data(http.StatusOK, "application/json; charset=utf-8", b)
	})
	srv := &http.Server{Addr: *addr, Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
		<-stop
		srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
