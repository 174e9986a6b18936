package httpapi_test

import (
	"context"
	"net/http"
	"testing"

	"paysvc/internal/payments"
	"paysvc/internal/processor/sandbox"
)

// fuzzPayment pays an embedded payment of amount with card in the fuzz
// server's merchant and returns its id.
func fuzzPayment(f *testing.F, h *harness, merchantID string, amount int64, card string) string {
	f.Helper()
	ctx := context.Background()
	cur := "usd"
	sc := payments.Scope{MerchantID: merchantID}
	created, err := h.svc.CreateIntent(ctx, sc, payments.IntentInput{Amount: &amount, Currency: &cur})
	if err != nil {
		f.Fatal(err)
	}
	if _, err := sandbox.New(h.db, "http://checkout.test").Cards(h.svc).ConfirmPayment(ctx, created.PaymentIntentID, created.PublishableKey, created.ClientSecret, card); err != nil {
		f.Fatal(err)
	}
	return created.PaymentIntentID
}

// moneyAnswers are the answers a refund or evidence POST may give; anything
// else (a 5xx above all) fails the input.
var moneyAnswers = map[int]map[string]bool{
	http.StatusOK: {"": true},
	http.StatusBadRequest: {"validation_error": true, "refund_not_allowed": true, "already_refunded": true,
		"refund_amount_too_large": true, "insufficient_balance": true},
	http.StatusNotFound:              {"payment_not_found": true},
	http.StatusRequestEntityTooLarge: {"payload_too_large": true},
}

func fuzzMoneyPost(t *testing.T, h *harness, key, path string, body []byte) {
	r := h.do("POST", path, key, body)
	codes, ok := moneyAnswers[r.Status]
	if !ok || (r.Status != http.StatusOK && !codes[r.code()]) {
		t.Errorf("POST %s %q: got %d %s", path, body, r.Status, r.Raw)
	}
}

func FuzzCreateRefund(f *testing.F) {
	h, m, key := fuzzServer(f)
	// A well-funded balance and a large payment: most accepted amounts are
	// refunded; the fuzzer soon exhausts it and reaches the refusals too.
	for range 3 {
		fuzzPayment(f, h, m, 99999999, sandbox.CardSuccess)
	}
	pi := fuzzPayment(f, h, m, 5000, sandbox.CardSuccess)
	for _, seed := range []string{
		`{"payment_intent":"` + pi + `","amount":100}`,
		`{"payment_intent":"` + pi + `","amount":100,"reason":"duplicate"}`,
		`{"payment_intent":"` + pi + `"}`,
		`{"payment_intent":"` + pi + `","amount":0}`,
		`{"payment_intent":"` + pi + `","amount":-1}`,
		`{"payment_intent":"` + pi + `","amount":1.5}`,
		`{"payment_intent":"` + pi + `","amount":"1"}`,
		`{"payment_intent":"` + pi + `","amount":99999999999999999999}`,
		`{"payment_intent":"` + pi + `","reason":"because"}`,
		`{"payment_intent":"` + pi + `","session_id":"cs_x"}`,
		`{"payment_intent":"pi_unknown"}`,
		`{"payment_intent":"cs_x"}`,
		`{"session_id":"cs_unknown","amount":1}`,
		`{"session_id":null}`,
		`{"amount":1}`,
		`{"payment_intent":"` + pi + `","x":1}`,
		`{}`,
		`[]`,
		`null`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzMoneyPost(t, h.forInput(t), key, "/v1/refunds", body)
	})
}

func FuzzDisputeEvidence(f *testing.F) {
	h, m, key := fuzzServer(f)
	pi := fuzzPayment(f, h, m, 2500, sandbox.CardDispute)
	ctx := context.Background()
	sc := payments.Scope{MerchantID: m}
	var pev, dp string
	if err := h.db.Get(&pev, `SELECT id FROM processor_events WHERE payment_intent_id = $1 AND type = 'dispute.created'`, pi); err != nil {
		f.Fatal(err)
	}
	if err := h.svc.ApplyProcessorEvent(ctx, sc, pev); err != nil {
		f.Fatal(err)
	}
	if err := h.db.Get(&dp, `SELECT id FROM disputes WHERE payment_intent_id = $1`, pi); err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		`{"evidence":{"customer_name":"Ada","product_description":"A mug"}}`,
		`{"evidence":{"uncategorized_text":""}}`,
		`{"evidence":{"uncategorized_text":"x"},"submit":false}`,
		`{"evidence":{"nonsense":"x"}}`,
		`{"evidence":{"customer_name":1}}`,
		`{"evidence":{"customer_name":null}}`,
		`{"evidence":["x"]}`,
		`{"evidence":null}`,
		`{"submit":"yes"}`,
		`{"evidence":{"customer_name":"\u0000"}}`,
		`{"evidence":{}}`,
		`{}`,
		`[]`,
		``,
	} {
		f.Add([]byte(seed))
	}
	// submit:true is left out of the seeds: it would close the dispute to
	// every later input. The fuzzer may still find it, which is fine.
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzMoneyPost(t, h.forInput(t), key, "/v1/disputes/"+dp+"/evidence", body)
	})
}
