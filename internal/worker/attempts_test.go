package worker_test

import (
	"database/sql"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"paysvc/internal/payments"
	"paysvc/internal/processor/sandbox"
)

// TestDeliveryKeepsEveryAttempt checks that each attempt of a delivery is
// kept with its time, HTTP status, the start of the response body (bounded,
// valid UTF-8) and its error: one without a response, one refused with a
// long body that is not UTF-8, and the success. The delivery's row carries
// its event's type and its last attempt's response, failed or not, which
// the delivery log reads (migration 0020).
func TestDeliveryKeepsEveryAttempt(t *testing.T) {
	s := newDeliveryStack(t)
	s.startWorker(t)
	sc := payments.Scope{MerchantID: s.merchant(t, "Attempt log shop")}
	long := strings.Repeat("é", payments.MaxAttemptResponse) + "\xff\x00tail" // 2 bytes a rune: cut mid-way
	var n atomic.Int32
	var lastBefore sql.NullString // the row's last_response_body when the third attempt came
	rc := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			panic(http.ErrAbortHandler) // the connection drops: no response at all
		case 2:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(long))
		case 3:
			if err := s.db.Get(&lastBefore, `SELECT last_response_body FROM webhook_deliveries WHERE merchant_id = $1`, sc.MerchantID); err != nil {
				t.Error(err)
			}
			fallthrough
		default:
			_, _ = w.Write([]byte("thanks"))
		}
	}))
	t.Cleanup(rc.Close)
	ep := s.endpoint(t, sc, rc.URL+"/hooks")
	ev := s.eventOf(t, s.pay(t, sc, sandbox.CardSuccess, nil))
	row := s.settled(t, ep.ID, ev, 30*time.Second)
	if row.Status != payments.DeliverySucceeded || row.Attempts != 3 {
		t.Fatalf("delivery: got %+v, want succeeded after 3 attempts", row)
	}

	var got []struct {
		ID         string         `db:"id"`
		HTTPStatus sql.NullInt64  `db:"http_status"`
		Body       string         `db:"response_body"`
		Error      sql.NullString `db:"error"`
		Created    time.Time      `db:"created_at"`
		Live       bool           `db:"livemode"`
	}
	const q = `SELECT id, http_status, response_body, error, created_at, livemode FROM webhook_attempts
	WHERE merchant_id = $1 AND delivery_id = $2 ORDER BY created_at`
	if err := s.db.Select(&got, q, sc.MerchantID, row.ID); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("attempts kept: got %d, want 3", len(got))
	}
	if a := got[0]; a.HTTPStatus.Valid || !a.Error.Valid || !strings.HasPrefix(a.Error.String, "send:") || a.Body != "" {
		t.Errorf("attempt 1 (no response): got %+v, want no status, a send error, no body", a)
	}
	a := got[1]
	if a.HTTPStatus.Int64 != http.StatusServiceUnavailable || a.Error.String != "receiver answered 503" {
		t.Errorf("attempt 2: got status %v, error %v, want 503 and receiver answered 503", a.HTTPStatus, a.Error)
	}
	if len(a.Body) > payments.MaxAttemptResponse+2 || !utf8.ValidString(a.Body) || !strings.HasPrefix(a.Body, "éé") || strings.Contains(a.Body, "tail") {
		t.Errorf("attempt 2 body: got %d bytes (valid UTF-8: %v), want the first %d bytes of the response as valid UTF-8",
			len(a.Body), utf8.ValidString(a.Body), payments.MaxAttemptResponse)
	}
	if a := got[2]; a.HTTPStatus.Int64 != http.StatusOK || a.Error.Valid || a.Body != "thanks" || a.Live {
		t.Errorf("attempt 3: got %+v, want 200, no error, body thanks, test mode", a)
	}
	var logged struct {
		EventType string `db:"event_type"`
		Body      string `db:"last_response_body"`
	}
	if err := s.db.Get(&logged, `SELECT d.event_type, d.last_response_body FROM webhook_deliveries d
		JOIN events e ON e.id = d.event_id AND d.event_type = e.type WHERE d.id = $1`, row.ID); err != nil {
		t.Errorf("the delivery's row with its event's type: %v", err)
	}
	if logged.Body != "thanks" || lastBefore.String != got[1].Body {
		t.Errorf("the delivery's last_response_body: %q after the success, %q (%d bytes) after the 503; want thanks and the 503's %d bytes",
			logged.Body, lastBefore.String, len(lastBefore.String), len(got[1].Body))
	}
	if !got[0].Created.Before(got[1].Created) || !got[1].Created.Before(got[2].Created) {
		t.Errorf("attempt times: got %v, %v, %v, want increasing", got[0].Created, got[1].Created, got[2].Created)
	}
}
