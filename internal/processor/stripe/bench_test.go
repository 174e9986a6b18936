package stripe_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/client"
	"github.com/stripe/stripe-go/v76/webhook"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/processor/stripe/stripemock"
	"paysvc/internal/testenv"
)

// reportLatency reports the p50 and p99 of ds.
func reportLatency(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	if len(ds) == 0 {
		return
	}
	b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkCreateIntent measures a payment intent's creation on Stripe
// (stripe-mock): stripe-mock's own latency (a bare stripe-go call), and the
// service's (validation, the account lookup, the call, the id map and the
// row); the difference is the platform's overhead.
func BenchmarkCreateIntent(b *testing.B) {
	db := testenv.DB(b)
	base := stripemock.Start(b)
	ctx := context.Background()
	b.Run("stripe-mock", func(b *testing.B) {
		cfg := &stripego.BackendConfig{URL: stripego.String(base), LeveledLogger: &stripego.LeveledLogger{Level: stripego.LevelNull}}
		bk := stripego.GetBackendWithConfig(stripego.APIBackend, cfg)
		api := client.New("sk_test_bench", &stripego.Backends{API: bk, Connect: bk, Uploads: bk})
		ds := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			start := time.Now()
			p := &stripego.PaymentIntentParams{Amount: stripego.Int64(1000), Currency: stripego.String("usd")}
			p.SetStripeAccount("acct_bench")
			if _, err := api.PaymentIntents.New(p); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		reportLatency(b, ds)
	})
	b.Run("service", func(b *testing.B) {
		svc := payments.NewService(postgres.New(db), nil, time.Now, payments.WithProcessor(newProcessor(db, base)))
		acct := connected(b, db, false)
		sc := payments.Scope{MerchantID: acct.MerchantID}
		amount, cur := int64(1000), "usd"
		ds := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			start := time.Now()
			if _, err := svc.CreateIntent(ctx, sc, payments.IntentInput{Amount: &amount, Currency: &cur}); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		reportLatency(b, ds)
	})
}

// BenchmarkInboundEvents measures inbound Stripe events accepted: the
// signature checked, the event translated and stored once with its job
// (events/s = 1e9 / ns/op).
func BenchmarkInboundEvents(b *testing.B) {
	db := testenv.DB(b)
	p := newProcessor(db, "http://127.0.0.1:1") // inbound makes no calls
	svc := payments.NewService(postgres.New(db), nil, time.Now, payments.WithProcessor(p))
	in := p.Inbound(whsec, svc)
	acct := connected(b, db, false)
	var stripeAcct string
	if err := db.Get(&stripeAcct, `SELECT account_id FROM stripe_accounts WHERE merchant_id = $1`, acct.MerchantID); err != nil {
		b.Fatal(err)
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	payloads, sigs := make([][]byte, b.N), make([]string, b.N)
	for i := range payloads {
		payloads[i], _ = json.Marshal(map[string]any{
			"id": "evt_" + run + "_" + strconv.Itoa(i), "object": "event", "api_version": "2023-10-16", "created": time.Now().Unix(),
			"account": stripeAcct, "type": "payment_intent.succeeded",
			"data": map[string]any{"object": map[string]any{"id": "pi_x", "object": "payment_intent",
				"metadata": map[string]string{"paysvc_payment_intent": "pi_bench" + strconv.Itoa(i)}}},
		})
		sigs[i] = webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payloads[i], Secret: whsec}).Header
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := in.Receive(context.Background(), payloads[i], sigs[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
