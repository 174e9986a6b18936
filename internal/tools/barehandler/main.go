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
// (concurrent reads share one statement); -read plain through
// Store.ProductUnshared, the same prepared single-row SELECT the API ran
// before reads were shared, one a request, as a first handler would (on a
// pool that prepares nothing, the call of products_by_keys that stands for
// it there).
//
// It serves the bench only: no key is checked, so it listens on loopback.
package main

import (
	"context"
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
	conns := flag.Int("db-conns", 64, "PostgreSQL connections (bin/api serve's pool)")
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

	store := postgres.New(db)
	get := store.Product
	if *read == "plain" {
		get = store.ProductUnshared
	}

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.GET("/v1/products/:id", func(c *gin.Context) {
		p, err := get(c.Request.Context(), sc, c.Param("id"))
		var pe *payments.Error
		switch {
		case errors.As(err, &pe) && pe.Code == payments.ProductNotFound:
			c.Data(http.StatusNotFound, "application/json; charset=utf-8", []byte(`{"error":{"code":"product_not_found"}}`))
			return
		case err != nil:
			log.Printf("barehandler: %v", err)
			c.Data(http.StatusInternalServerError, "application/json; charset=utf-8", []byte(`{"error":{"code":"internal_error"}}`))
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
