package worker_test

// Refunds and disputes through the queue: the store's after-commit hook
// enqueues the money tasks, a real asynq server runs worker.Handlers (with
// the Deliverer, as cmd/worker does) and the sandbox processor executes
// refunds into sandbox_refunds. Not parallel, for the reason given in
// delivery_test.go: the asynq servers of this test binary share one Redis
// database, which newDeliveryStack flushes.
// TestAfterWorkerKilled/Refund is the exception: it is parallel, on
// databases of its own.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"paysvc/internal/payments"
	"paysvc/internal/processor"
	"paysvc/internal/processor/sandbox"
	"paysvc/internal/tasks"
	"paysvc/internal/testenv"
	"paysvc/internal/webhook"
	"paysvc/internal/worker"
)

// paid is what deliveryStack.pay charges; netPaid is what each such payment
// credits a free-plan merchant's balance (1500 − 4.9 % − 40 = 1386).
const (
	paid    = int64(1500)
	netPaid = paid - (paid*490+5000)/10000 - 40
)

// moneyRetryDelay is the retry delay of money tasks in these tests (asynq's
// default, used by cmd/worker, waits 15 s and more).
const moneyRetryDelay = 100 * time.Millisecond

// startMoneyWorker runs an asynq server with every handler cmd/worker
// registers (worker.Handlers, which include the money handlers, and the
// Deliverer) over svc (nil: the stack's), until the test ends. retryDelay
// nil: money tasks are retried after moneyRetryDelay.
func (s *deliveryStack) startMoneyWorker(t *testing.T, svc *payments.Service, retryDelay asynq.RetryDelayFunc) {
	t.Helper()
	if svc == nil {
		svc = s.svc
	}
	if retryDelay == nil {
		retryDelay = moneyRetries(nil)
	}
	srv := asynq.NewServer(s.redisOpt, asynq.Config{
		Concurrency:              10,
		Queues:                   tasks.Queues,
		RetryDelayFunc:           retryDelay,
		TaskCheckInterval:        10 * time.Millisecond,
		DelayedTaskCheckInterval: 10 * time.Millisecond,
		ShutdownTimeout:          5 * time.Second,
		LogLevel:                 asynq.FatalLevel, // failed attempts are expected in some tests
	})
	mux := asynq.NewServeMux()
	(&worker.Handlers{Service: svc, Store: s.store, Log: s.log}).Register(mux)
	(&worker.Deliverer{
		Store:     s.store,
		Sealer:    s.box,
		Client:    webhook.NewClient(webhook.Options{AllowPrivateNetworks: true, InsecureTLS: true}),
		RetryBase: deliveryBase,
		Log:       s.log,
		Now:       time.Now,
		Enqueuer:  s.enq,
	}).Register(mux)
	if err := srv.Start(mux); err != nil {
		t.Fatalf("start asynq server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
}

// retryRecord is one call of the retry delay function for a money task.
type retryRecord struct {
	Type string
	ID   string
	N    int
	Err  error
}

// retryLog records the retry delays asked for money tasks.
type retryLog struct {
	mu   sync.Mutex
	recs []retryRecord
}

func (l *retryLog) of(id string) []retryRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []retryRecord
	for _, r := range l.recs {
		if r.ID == id {
			out = append(out, r)
		}
	}
	return out
}

// moneyRetries is cmd/worker's RetryDelayFunc except that money tasks wait
// moneyRetryDelay; each of their retries is recorded in log (if not nil).
func moneyRetries(log *retryLog) asynq.RetryDelayFunc {
	base := tasks.RetryDelay(deliveryBase)
	return func(n int, err error, task *asynq.Task) time.Duration {
		switch task.Type() {
		case tasks.TypeExecuteRefund, tasks.TypeProcessorEvent, tasks.TypeSubmitEvidence:
			if log != nil {
				var ref tasks.Ref
				_ = json.Unmarshal(task.Payload(), &ref)
				log.mu.Lock()
				log.recs = append(log.recs, retryRecord{Type: task.Type(), ID: ref.ID, N: n, Err: err})
				log.mu.Unlock()
			}
			return moneyRetryDelay
		}
		return base(n, err, task)
	}
}

// scriptedProcessor is the sandbox with refunds and evidence submissions
// counted, and refunds answered by script first: a non-nil error from it is
// returned instead of asking the sandbox.
type scriptedProcessor struct {
	*sandbox.Sandbox
	script func(ctx context.Context, call int, r processor.RefundRequest) error // call: 1-based, per refund id

	mu       sync.Mutex
	calls    []refundCall
	evidence map[string]int // dispute id → SubmitDisputeEvidence calls
}

var _ processor.Processor = (*scriptedProcessor)(nil)

// refundCall is one Refund call and the asynq retry count of the task that
// made it (-1 outside a task).
type refundCall struct {
	ID      string
	Retried int
}

func (p *scriptedProcessor) Refund(ctx context.Context, acct processor.Account, r processor.RefundRequest) (processor.RefundResult, error) {
	retried, ok := asynq.GetRetryCount(ctx)
	if !ok {
		retried = -1
	}
	p.mu.Lock()
	p.calls = append(p.calls, refundCall{ID: r.ID, Retried: retried})
	n := 0
	for _, c := range p.calls {
		if c.ID == r.ID {
			n++
		}
	}
	p.mu.Unlock()
	if p.script != nil {
		if err := p.script(ctx, n, r); err != nil {
			return processor.RefundResult{}, err
		}
	}
	return p.Sandbox.Refund(ctx, acct, r)
}

func (p *scriptedProcessor) SubmitDisputeEvidence(ctx context.Context, acct processor.Account, e processor.DisputeEvidence) (processor.DisputeDecision, error) {
	p.mu.Lock()
	if p.evidence == nil {
		p.evidence = map[string]int{}
	}
	p.evidence[e.ID]++
	p.mu.Unlock()
	return p.Sandbox.SubmitDisputeEvidence(ctx, acct, e)
}

// callsOf returns the Refund calls for refund id, in order.
func (p *scriptedProcessor) callsOf(id string) []refundCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []refundCall
	for _, c := range p.calls {
		if c.ID == id {
			out = append(out, c)
		}
	}
	return out
}

func (p *scriptedProcessor) evidenceCalls(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.evidence[id]
}

// scriptedService is a service on the stack's store whose processor is p
// (over the sandbox of the stack's database).
func (s *deliveryStack) scriptedService(p *scriptedProcessor) *payments.Service {
	p.Sandbox = sandbox.New(s.db, "http://checkout.test")
	return payments.NewService(s.store, nil, time.Now, payments.WithProcessor(p), payments.WithSecrets(s.box))
}

// fund makes n successful payments of paid: the balance gains n × netPaid.
func (s *deliveryStack) fund(t *testing.T, sc payments.Scope, n int) []string {
	t.Helper()
	var pis []string
	for range n {
		pis = append(pis, s.pay(t, sc, sandbox.CardSuccess, nil))
	}
	return pis
}

func (s *deliveryStack) refund(t *testing.T, sc payments.Scope, pi string, amount int64) payments.Refund {
	t.Helper()
	reason := "requested_by_customer"
	r, err := s.svc.CreateRefund(context.Background(), sc, payments.RefundInput{PaymentIntent: &pi, Amount: &amount, Reason: &reason})
	if err != nil {
		t.Fatalf("create refund of %d on %s: %v", amount, pi, err)
	}
	if r.Status != payments.RefundPending || r.Amount != amount {
		t.Fatalf("create refund of %d on %s: got %+v, want pending of %d", amount, pi, r, amount)
	}
	return r
}

func (s *deliveryStack) readRefund(t *testing.T, sc payments.Scope, id string) payments.Refund {
	t.Helper()
	r, err := s.store.Refund(context.Background(), sc, id)
	if err != nil {
		t.Fatalf("read refund %s: %v", id, err)
	}
	return r
}

// finished waits until the refund is no longer pending and returns it.
func (s *deliveryStack) finished(t *testing.T, sc payments.Scope, id string, within time.Duration) payments.Refund {
	t.Helper()
	var r payments.Refund
	waitUntil(t, within, "refund "+id+" finished", func() (bool, string) {
		r = s.readRefund(t, sc, id)
		return r.Status != payments.RefundPending, r.Status
	})
	return r
}

// usdBalance returns the scope's usd balance.
func (s *deliveryStack) usdBalance(t *testing.T, sc payments.Scope) payments.Balance {
	t.Helper()
	bs, err := s.svc.Balances(context.Background(), sc)
	if err != nil {
		t.Fatalf("balances: %v", err)
	}
	for _, b := range bs {
		if b.Currency == "usd" {
			return b
		}
	}
	t.Fatalf("balances: got %+v, want a usd balance", bs)
	return payments.Balance{}
}

func checkBalance(t *testing.T, what string, got payments.Balance, ledgerTotal, reserved int64) {
	t.Helper()
	if got.LedgerTotal != ledgerTotal || got.Reserved != reserved {
		t.Errorf("%s: got ledger_total %d, reserved %d, want %d, %d", what, got.LedgerTotal, got.Reserved, ledgerTotal, reserved)
	}
}

// paymentMoney is what has left or is leaving a payment.
type paymentMoney struct {
	Refunded  int64          `db:"amount_refunded"`
	Pending   int64          `db:"amount_refund_pending"`
	DisputeID sql.NullString `db:"dispute_id"`
}

func (s *deliveryStack) paymentMoney(t *testing.T, pi string) paymentMoney {
	t.Helper()
	var m paymentMoney
	if err := s.db.Get(&m, `SELECT amount_refunded, amount_refund_pending, dispute_id FROM payment_intents WHERE id = $1`, pi); err != nil {
		t.Fatalf("read payment %s: %v", pi, err)
	}
	return m
}

func checkPayment(t *testing.T, what string, got paymentMoney, refunded, pending int64) {
	t.Helper()
	if got.Refunded != refunded || got.Pending != pending {
		t.Errorf("%s: got amount_refunded %d, amount_refund_pending %d, want %d, %d", what, got.Refunded, got.Pending, refunded, pending)
	}
}

type ledgerRow struct {
	Type     string `db:"type"`
	Amount   int64  `db:"amount"`
	Currency string `db:"currency"`
}

// ledgerOf returns the ledger entries of source (a pi_, re_ or dp_).
func (s *deliveryStack) ledgerOf(t *testing.T, source string) []ledgerRow {
	t.Helper()
	var rows []ledgerRow
	if err := s.db.Select(&rows, `SELECT type, amount, currency FROM ledger_entries WHERE source_id = $1 ORDER BY created_at, type`, source); err != nil {
		t.Fatal(err)
	}
	return rows
}

// eventsAbout returns the data of the events of type typ about object id.
func (s *deliveryStack) eventsAbout(t *testing.T, typ, id string) []map[string]any {
	t.Helper()
	var raw [][]byte
	if err := s.db.Select(&raw, `SELECT data FROM events WHERE type = $1 AND data->>'id' = $2 ORDER BY seq`, typ, id); err != nil {
		t.Fatal(err)
	}
	out := make([]map[string]any, len(raw))
	for i, b := range raw {
		if err := json.Unmarshal(b, &out[i]); err != nil {
			t.Fatalf("event data %s: %v", b, err)
		}
	}
	return out
}

func (s *deliveryStack) count(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := s.db.Get(&n, q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// checkRefundedOnce checks that refund id succeeded and moved money once:
// one sandbox_refunds row, one ledger refund entry of −amount, one
// charge.refunded event carrying the refund.
func (s *deliveryStack) checkRefundedOnce(t *testing.T, sc payments.Scope, id string) {
	t.Helper()
	r := s.readRefund(t, sc, id)
	if r.Status != payments.RefundSucceeded || r.FailureReason != nil {
		t.Errorf("refund %s: got status %q, failure reason %v, want succeeded without one", id, r.Status, r.FailureReason)
	}
	if n := s.count(t, `SELECT count(*) FROM sandbox_refunds WHERE refund_id = $1 AND amount = $2`, id, r.Amount); n != 1 {
		t.Errorf("sandbox_refunds rows of %s for %d: got %d, want 1 (executed exactly once)", id, r.Amount, n)
	}
	if got, want := s.ledgerOf(t, id), []ledgerRow{{payments.LedgerRefund, -r.Amount, "usd"}}; !slices.Equal(got, want) {
		t.Errorf("ledger entries of %s: got %+v, want %+v", id, got, want)
	}
	evs := s.eventsAbout(t, payments.EventChargeRefunded, id)
	if len(evs) != 1 {
		t.Fatalf("charge.refunded events about %s: got %d, want 1", id, len(evs))
	}
	want := map[string]any{}
	b, _ := json.Marshal(r.Object())
	_ = json.Unmarshal(b, &want)
	if b, _ := json.Marshal(evs[0]); string(b) != string(mustJSON(t, want)) {
		t.Errorf("charge.refunded data: got %s, want the refund %s", b, mustJSON(t, want))
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// criticalTask returns the task of id in the critical queue.
func (s *deliveryStack) criticalTask(t *testing.T, id string) *asynq.TaskInfo {
	t.Helper()
	return s.queuedTask(t, tasks.QueueCritical, id)
}

// queuedTask returns the task of id in queue.
func (s *deliveryStack) queuedTask(t *testing.T, queue, id string) *asynq.TaskInfo {
	t.Helper()
	info, err := s.insp.GetTaskInfo(queue, id)
	if err != nil {
		t.Fatalf("task %s in the %s queue: %v", id, queue, err)
	}
	return info
}

// pendingTasks returns the ids of a queue's pending tasks.
func (s *deliveryStack) pendingTasks(t *testing.T, queue string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	list, err := s.insp.ListPendingTasks(queue, asynq.PageSize(10000))
	if errors.Is(err, asynq.ErrQueueNotFound) {
		return out
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range list {
		out[ti.ID] = true
	}
	return out
}

// processorEventOf returns the id of the processor event about payment pi.
func (s *deliveryStack) processorEventOf(t *testing.T, pi string) string {
	t.Helper()
	var ids []string
	if err := s.db.Select(&ids, `SELECT id FROM processor_events WHERE payment_intent_id = $1 AND type = 'dispute.created'`, pi); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 1 {
		t.Fatalf("processor events of %s: got %v, want one", pi, ids)
	}
	return ids[0]
}

// disputesOf returns the disputes of payment pi.
func (s *deliveryStack) disputesOf(t *testing.T, sc payments.Scope, pi string) []payments.Dispute {
	t.Helper()
	var ids []string
	if err := s.db.Select(&ids, `SELECT id FROM disputes WHERE payment_intent_id = $1 ORDER BY created_at`, pi); err != nil {
		t.Fatal(err)
	}
	out := make([]payments.Dispute, len(ids))
	for i, id := range ids {
		d, err := s.svc.Dispute(context.Background(), sc, id)
		if err != nil {
			t.Fatalf("read dispute %s: %v", id, err)
		}
		out[i] = d
	}
	return out
}

// waitDispute waits until payment pi has a dispute and returns it.
func (s *deliveryStack) waitDispute(t *testing.T, sc payments.Scope, pi string, within time.Duration) payments.Dispute {
	t.Helper()
	var ds []payments.Dispute
	waitUntil(t, within, "a dispute on "+pi, func() (bool, string) {
		ds = s.disputesOf(t, sc, pi)
		return len(ds) > 0, fmt.Sprintf("%d disputes", len(ds))
	})
	if len(ds) != 1 {
		t.Fatalf("disputes on %s: got %d, want 1", pi, len(ds))
	}
	return ds[0]
}

// waitDisputeDecided waits until dispute id leaves under_review.
func (s *deliveryStack) waitDisputeDecided(t *testing.T, sc payments.Scope, id string, within time.Duration) payments.Dispute {
	t.Helper()
	var d payments.Dispute
	waitUntil(t, within, "dispute "+id+" decided", func() (bool, string) {
		var err error
		if d, err = s.svc.Dispute(context.Background(), sc, id); err != nil {
			t.Fatal(err)
		}
		return d.Status != payments.DisputeUnderReview, d.Status
	})
	return d
}

func submitEvidence(t *testing.T, svc *payments.Service, sc payments.Scope, id, text string) payments.Dispute {
	t.Helper()
	submit := true
	d, err := svc.UpdateEvidence(context.Background(), sc, id, payments.EvidenceInput{
		Evidence: map[string]string{"uncategorized_text": text, "customer_name": "Jo Doe"}, Submit: &submit,
	})
	if err != nil {
		t.Fatalf("submit evidence %q on %s: %v", text, id, err)
	}
	if d.Status != payments.DisputeUnderReview || d.SubmittedAt == nil {
		t.Fatalf("submit evidence on %s: got status %q, submitted %v, want under_review and submitted", id, d.Status, d.SubmittedAt)
	}
	return d
}

// checkDisputeOpened checks a freshly opened dispute on a payment of paid by
// the sandbox's dispute card, opened between from and to.
func (s *deliveryStack) checkDisputeOpened(t *testing.T, pi string, d payments.Dispute, from, to time.Time) {
	t.Helper()
	if d.Status != payments.DisputeNeedsResponse || d.Reason != "fraudulent" || d.Amount != paid || d.Currency != "usd" || d.PaymentIntentID != pi {
		t.Errorf("dispute: got status %q, reason %q, amount %d %s, payment %s, want needs_response, fraudulent, %d usd, %s",
			d.Status, d.Reason, d.Amount, d.Currency, d.PaymentIntentID, paid, pi)
	}
	if d.EvidenceDueBy == nil {
		t.Errorf("evidence_due_by: got none, want about 7 days from now")
	} else if lo, hi := from.Add(payments.DisputeResponseWindow-time.Second), to.Add(payments.DisputeResponseWindow+time.Second); d.EvidenceDueBy.Before(lo) || d.EvidenceDueBy.After(hi) {
		t.Errorf("evidence_due_by: got %v, want between %v and %v", d.EvidenceDueBy, lo, hi)
	}
	if got, want := s.ledgerOf(t, d.ID), []ledgerRow{{payments.LedgerDispute, -paid, "usd"}}; !slices.Equal(got, want) {
		t.Errorf("ledger entries of %s: got %+v, want %+v", d.ID, got, want)
	}
	if m := s.paymentMoney(t, pi); m.DisputeID.String != d.ID {
		t.Errorf("payment %s dispute_id: got %v, want %s", pi, m.DisputeID, d.ID)
	}
	evs := s.eventsAbout(t, payments.EventDisputeCreated, d.ID)
	if len(evs) != 1 {
		t.Fatalf("charge.dispute.created events about %s: got %d, want 1", d.ID, len(evs))
	}
	if evs[0]["status"] != payments.DisputeNeedsResponse || evs[0]["amount_cents"] != float64(paid) || evs[0]["payment_intent"] != pi {
		t.Errorf("charge.dispute.created data: got %v, want the needs_response dispute of %d on %s", evs[0], paid, pi)
	}
	if n := s.count(t, `SELECT count(*) FROM processor_events WHERE payment_intent_id = $1 AND type = 'dispute.created' AND processed_at IS NOT NULL`, pi); n != 1 {
		t.Errorf("applied processor events of %s: got %d, want 1", pi, n)
	}
}

// checkDisputeClosed checks a decided dispute: its status, the reversal
// (won) or its absence (lost), and one charge.dispute.closed event.
func (s *deliveryStack) checkDisputeClosed(t *testing.T, d payments.Dispute, status string) {
	t.Helper()
	if d.Status != status || d.ClosedAt == nil {
		t.Errorf("dispute %s: got status %q, closed %v, want %s and closed", d.ID, d.Status, d.ClosedAt, status)
	}
	want := []ledgerRow{{payments.LedgerDispute, -paid, "usd"}}
	if status == payments.DisputeWon {
		want = append(want, ledgerRow{payments.LedgerDisputeReversal, paid, "usd"})
	}
	if got := s.ledgerOf(t, d.ID); !slices.Equal(got, want) {
		t.Errorf("ledger entries of %s: got %+v, want %+v", d.ID, got, want)
	}
	evs := s.eventsAbout(t, payments.EventDisputeClosed, d.ID)
	if len(evs) != 1 {
		t.Fatalf("charge.dispute.closed events about %s: got %d, want 1", d.ID, len(evs))
	}
	if evs[0]["status"] != status || evs[0]["evidence_submitted"] != true {
		t.Errorf("charge.dispute.closed data: got %v, want status %s with evidence submitted", evs[0], status)
	}
	if n := s.count(t, `SELECT count(*) FROM disputes WHERE id = $1 AND evidence_sent_at IS NOT NULL`, d.ID); n != 1 {
		t.Errorf("dispute %s: evidence_sent_at not set, want it set once the processor has the evidence", d.ID)
	}
}

func TestRefundExecutedThroughQueue(t *testing.T) {
	s := newDeliveryStack(t)
	sc := payments.Scope{MerchantID: s.merchant(t, "Refund shop")}
	pis := s.fund(t, sc, 3)
	checkBalance(t, "balance after three payments", s.usdBalance(t, sc), 3*netPaid, 0)

	// No worker yet: the refund is pending, reserved, and its task waits
	// in the critical queue, enqueued after commit.
	const amount = 1000
	r := s.refund(t, sc, pis[0], amount)
	checkBalance(t, "balance with the refund pending", s.usdBalance(t, sc), 3*netPaid, amount)
	checkPayment(t, "payment with the refund pending", s.paymentMoney(t, pis[0]), 0, amount)
	info := s.criticalTask(t, r.ID)
	var ref tasks.Ref
	if err := json.Unmarshal(info.Payload, &ref); err != nil {
		t.Fatalf("task payload %s: %v", info.Payload, err)
	}
	if info.Type != tasks.TypeExecuteRefund || info.State != asynq.TaskStatePending || ref != (tasks.Ref{MerchantID: sc.MerchantID, ID: r.ID}) {
		t.Errorf("task %s: got type %q, state %v, payload %+v, want a pending %s for the refund", r.ID, info.Type, info.State, ref, tasks.TypeExecuteRefund)
	}
	if info.MaxRetry != tasks.MoneyMaxRetry {
		t.Errorf("task %s: got max retry %d, want %d", r.ID, info.MaxRetry, tasks.MoneyMaxRetry)
	}

	s.startMoneyWorker(t, nil, nil)
	if got := s.finished(t, sc, r.ID, 15*time.Second); got.Status != payments.RefundSucceeded {
		t.Fatalf("refund: got %+v, want succeeded", got)
	}
	s.checkRefundedOnce(t, sc, r.ID)
	checkBalance(t, "balance after the refund", s.usdBalance(t, sc), 3*netPaid-amount, 0)
	checkPayment(t, "payment after the refund", s.paymentMoney(t, pis[0]), amount, 0)
	for _, pi := range pis[1:] {
		checkPayment(t, "other payment "+pi, s.paymentMoney(t, pi), 0, 0)
	}
	if n := s.count(t, `SELECT count(*) FROM ledger_entries WHERE merchant_id = $1 AND type = 'refund'`, sc.MerchantID); n != 1 {
		t.Errorf("the merchant's refund ledger entries: got %d, want 1", n)
	}
}

func refundExactlyOnceAfterWorkerKilled(t *testing.T) {
	bin := buildWorker(t)
	s := newDeliveryStackOn(t, testenv.OwnDatabaseURL(t), testenv.OwnRedisURL(t))
	sc := payments.Scope{MerchantID: s.merchant(t, "Killed refund shop")}
	pis := s.fund(t, sc, 2)

	// The first worker's sandbox records the refund, then takes 20 s to
	// answer: it is killed in that window.
	first := startWorkerProcess(t, s, bin, "first worker", "SANDBOX_REFUND_LATENCY=20s")
	r := s.refund(t, sc, pis[0], paid)
	waitUntil(t, 30*time.Second, "the sandbox to have executed "+r.ID, func() (bool, string) {
		n := s.count(t, `SELECT count(*) FROM sandbox_refunds WHERE refund_id = $1`, r.ID)
		return n == 1, fmt.Sprintf("%d sandbox_refunds rows", n)
	})
	first.kill(t)
	killedAt := time.Now()
	if got := s.readRefund(t, sc, r.ID); got.Status != payments.RefundPending {
		t.Fatalf("refund after the kill: got %q, want pending (the worker died before recording it)", got.Status)
	}
	checkBalance(t, "balance after the kill", s.usdBalance(t, sc), 2*netPaid, paid)

	startWorkerProcess(t, s, bin, "second worker", "SANDBOX_REFUND_LATENCY=0s")
	// asynq's recoverer (at start, then every minute) schedules a retry of
	// the dead worker's task once its lease (30 s) expired over 30 s ago:
	// about a minute after the kill.
	var info *asynq.TaskInfo
	waitUntil(t, 100*time.Second, "the dead worker's task recovered", func() (bool, string) {
		var err error
		if info, err = s.insp.GetTaskInfo(tasks.QueueCritical, r.ID); err != nil {
			return false, err.Error()
		}
		return info.State != asynq.TaskStateActive, fmt.Sprintf("state %v", info.State)
	})
	t.Logf("task recovered %v after the kill: state %v, last error %q", time.Since(killedAt).Round(100*time.Millisecond), info.State, info.LastErr)
	if info.State == asynq.TaskStateRetry {
		if info.LastErr != asynq.ErrLeaseExpired.Error() {
			t.Errorf("recovered task: got last error %q, want %q", info.LastErr, asynq.ErrLeaseExpired)
		}
		// cmd/worker waits asynq's default backoff (15 to 44 s for a first
		// retry) before running it; run it now instead.
		if err := s.insp.RunTask(tasks.QueueCritical, r.ID); err != nil && s.readRefund(t, sc, r.ID).Status == payments.RefundPending {
			t.Fatalf("run the recovered task now: %v", err)
		}
	}
	if got := s.finished(t, sc, r.ID, 30*time.Second); got.Status != payments.RefundSucceeded {
		t.Fatalf("refund after the second worker: got %+v, want succeeded", got)
	}
	t.Logf("refund finished %v after the kill", time.Since(killedAt).Round(100*time.Millisecond))
	s.checkRefundedOnce(t, sc, r.ID)
	checkBalance(t, "balance at the end", s.usdBalance(t, sc), 2*netPaid-paid, 0)
	checkPayment(t, "payment at the end", s.paymentMoney(t, pis[0]), paid, 0)
}

// TestRefundExactlyOnceAfterWorkerStopped: SIGTERM while a refund waits on
// a slow processor (SANDBOX_REFUND_LATENCY 20 s) that already executed it.
// The worker stops within WORKER_SHUTDOWN_TIMEOUT (1 s here), far inside the
// latency, handing the task straight back to the queue (no lease to wait
// out); the next worker runs it to its end, and the refund happens once.
func TestRefundExactlyOnceAfterWorkerStopped(t *testing.T) {
	bin := buildWorker(t)
	s := newDeliveryStack(t)
	sc := payments.Scope{MerchantID: s.merchant(t, "Stopped refund shop")}
	pis := s.fund(t, sc, 2)

	t.Setenv("SANDBOX_REFUND_LATENCY", "20s")
	t.Setenv("WORKER_SHUTDOWN_TIMEOUT", "1s")
	first := startWorkerProcess(t, s, bin, "first worker")
	r := s.refund(t, sc, pis[0], paid)
	waitUntil(t, 30*time.Second, "the sandbox to have executed "+r.ID, func() (bool, string) {
		n := s.count(t, `SELECT count(*) FROM sandbox_refunds WHERE refund_id = $1`, r.ID)
		return n == 1, fmt.Sprintf("%d sandbox_refunds rows", n)
	})
	stoppedAt := time.Now()
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.done:
	case <-time.After(10 * time.Second):
		t.Fatal("worker still running 10 s after SIGTERM with WORKER_SHUTDOWN_TIMEOUT=1s")
	}
	t.Logf("worker stopped %v after SIGTERM", time.Since(stoppedAt).Round(100*time.Millisecond))
	if info, err := s.insp.GetTaskInfo(tasks.QueueCritical, r.ID); err != nil || info.State != asynq.TaskStatePending {
		t.Errorf("refund task after the stop: got %+v, %v; want it pending again", info, err)
	}

	t.Setenv("SANDBOX_REFUND_LATENCY", "0s")
	startWorkerProcess(t, s, bin, "second worker")
	if got := s.finished(t, sc, r.ID, 30*time.Second); got.Status != payments.RefundSucceeded {
		t.Fatalf("refund after the second worker: got %+v, want succeeded", got)
	}
	t.Logf("refund finished %v after SIGTERM", time.Since(stoppedAt).Round(100*time.Millisecond))
	s.checkRefundedOnce(t, sc, r.ID)
	checkBalance(t, "balance at the end", s.usdBalance(t, sc), 2*netPaid-paid, 0)
	checkPayment(t, "payment at the end", s.paymentMoney(t, pis[0]), paid, 0)
}

func TestRefundRetriesRetryableProcessorErrors(t *testing.T) {
	s := newDeliveryStack(t)
	ctx := context.Background()
	sc := payments.Scope{MerchantID: s.merchant(t, "Flaky processor shop")}
	pis := s.fund(t, sc, 2)

	// The first three calls fail with a retryable error; the third is held
	// until the test has looked at the refund while it is failing.
	const failures = 3
	held, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	proc := &scriptedProcessor{script: func(ctx context.Context, call int, r processor.RefundRequest) error {
		if call > failures {
			return nil
		}
		if call == failures {
			close(held)
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return &processor.Error{Op: "refund", Retryable: true, Code: "processor_unavailable", Err: errors.New("503 from the processor")}
	}}
	retries := &retryLog{}
	s.startMoneyWorker(t, s.scriptedService(proc), moneyRetries(retries))

	const amount = 1200
	r := s.refund(t, sc, pis[0], amount)
	select {
	case <-held:
	case <-time.After(15 * time.Second):
		t.Fatalf("after 15s: got %d processor calls, want %d", len(proc.callsOf(r.ID)), failures)
	}
	// While failing: pending, reserved, nothing executed, the task retried.
	if got := s.readRefund(t, sc, r.ID); got.Status != payments.RefundPending {
		t.Errorf("refund while the processor fails: got %q, want pending", got.Status)
	}
	checkBalance(t, "balance while the processor fails", s.usdBalance(t, sc), 2*netPaid, amount)
	checkPayment(t, "payment while the processor fails", s.paymentMoney(t, pis[0]), 0, amount)
	if n := s.count(t, `SELECT count(*) FROM sandbox_refunds WHERE refund_id = $1`, r.ID); n != 0 {
		t.Errorf("sandbox_refunds rows while the processor fails: got %d, want 0", n)
	}
	if got := s.ledgerOf(t, r.ID); len(got) != 0 {
		t.Errorf("ledger entries while the processor fails: got %+v, want none", got)
	}
	if info := s.criticalTask(t, r.ID); info.State != asynq.TaskStateActive || info.Retried != failures-1 || info.LastErr == "" {
		t.Errorf("task during call %d: got state %v, retried %d, last error %q, want active, retried %d, an error",
			failures, info.State, info.Retried, info.LastErr, failures-1)
	}
	// Another refund on the same payment sees the reservation.
	left := paid - amount
	tooMuch := left + 1
	pi := pis[0]
	if _, err := s.svc.CreateRefund(ctx, sc, payments.RefundInput{PaymentIntent: &pi, Amount: &tooMuch}); payments.ErrorCode(err) != payments.RefundAmountTooLarge {
		t.Errorf("refund of %d more while %d is pending: got %v, want %s", tooMuch, amount, err, payments.RefundAmountTooLarge)
	}
	releaseOnce.Do(func() { close(release) })

	if got := s.finished(t, sc, r.ID, 15*time.Second); got.Status != payments.RefundSucceeded {
		t.Fatalf("refund: got %+v, want succeeded after %d retries", got, failures)
	}
	s.checkRefundedOnce(t, sc, r.ID)
	checkBalance(t, "balance after the refund", s.usdBalance(t, sc), 2*netPaid-amount, 0)
	checkPayment(t, "payment after the refund", s.paymentMoney(t, pis[0]), amount, 0)

	calls := proc.callsOf(r.ID)
	var retried []int
	for _, c := range calls {
		retried = append(retried, c.Retried)
	}
	if want := []int{0, 1, 2, 3}; !slices.Equal(retried, want) {
		t.Errorf("processor calls by retry count: got %v, want %v (one per attempt)", retried, want)
	}
	// Each failed attempt asked the delay function for its backoff (asynq
	// keeps retry times in whole seconds, so a 100 ms delay cannot be timed).
	recs := retries.of(r.ID)
	if len(recs) != failures {
		t.Fatalf("retry delays asked for %s: got %d, want %d", r.ID, len(recs), failures)
	}
	for i, rec := range recs {
		var perr *processor.Error
		if rec.Type != tasks.TypeExecuteRefund || rec.N != i || !errors.As(rec.Err, &perr) || !perr.Retryable {
			t.Errorf("retry %d: got type %s, n %d, error %v, want %s, n %d, the retryable processor error", i, rec.Type, rec.N, rec.Err, tasks.TypeExecuteRefund, i)
		}
	}

	// cmd/worker's delay for refunds backs off: never less than 15 s.
	delay := tasks.RetryDelay(deliveryBase)
	task := tasks.NewMoneyTask(tasks.TypeExecuteRefund, tasks.Ref{MerchantID: sc.MerchantID, ID: r.ID})
	for n := range 5 {
		if d := delay(n, errors.New("x"), task); d < 15*time.Second {
			t.Errorf("cmd/worker retry delay of a refund after %d retries: got %v, want at least 15s", n, d)
		}
	}
}

func TestRefundFailsOnPermanentProcessorError(t *testing.T) {
	s := newDeliveryStack(t)
	sc := payments.Scope{MerchantID: s.merchant(t, "Refused refund shop")}
	pis := s.fund(t, sc, 2)

	// The processor refuses the first refund it sees of each payment.
	var first sync.Map // payment id → its first refund id
	proc := &scriptedProcessor{script: func(_ context.Context, _ int, r processor.RefundRequest) error {
		if id, _ := first.LoadOrStore(r.PaymentIntentID, r.ID); id == r.ID {
			return &processor.Error{Op: "refund", Retryable: false, Code: "charge_expired_for_refund", Err: errors.New("refused")}
		}
		return nil
	}}
	retries := &retryLog{}
	s.startMoneyWorker(t, s.scriptedService(proc), moneyRetries(retries))

	// A refund of the whole payment: with it reserved, the balance (two
	// payments net of fees) could not cover another one as large.
	pi, amount := pis[0], paid
	r := s.refund(t, sc, pi, amount)
	got := s.finished(t, sc, r.ID, 15*time.Second)
	if got.Status != payments.RefundFailed || got.FailureReason == nil || *got.FailureReason != "charge_expired_for_refund" {
		t.Fatalf("refund: got status %q, failure reason %v, want failed with charge_expired_for_refund", got.Status, got.FailureReason)
	}
	time.Sleep(3 * moneyRetryDelay) // a failed attempt asks the delay function as soon as it returns
	if n := len(proc.callsOf(r.ID)); n != 1 {
		t.Errorf("processor calls for the refused refund: got %d, want 1 (no retry)", n)
	}
	if recs := retries.of(r.ID); len(recs) != 0 {
		t.Errorf("retries of the refused refund's task: got %+v, want none", recs)
	}
	checkBalance(t, "balance after the failure", s.usdBalance(t, sc), 2*netPaid, 0)
	checkPayment(t, "payment after the failure", s.paymentMoney(t, pi), 0, 0)
	if got := s.ledgerOf(t, r.ID); len(got) != 0 {
		t.Errorf("ledger entries of the failed refund: got %+v, want none", got)
	}
	if evs := s.eventsAbout(t, payments.EventChargeRefunded, r.ID); len(evs) != 0 {
		t.Errorf("charge.refunded events about the failed refund: got %v, want none", evs)
	}
	if n := s.count(t, `SELECT count(*) FROM events WHERE merchant_id = $1 AND type = $2`, sc.MerchantID, payments.EventChargeRefunded); n != 0 {
		t.Errorf("the merchant's charge.refunded events: got %d, want 0", n)
	}

	// The available balance and the payment are whole again: the same
	// refund is accepted (with the old reservation still held it would be
	// insufficient_balance; with the payment's pending amount, already_refunded).
	again := s.refund(t, sc, pi, amount)
	if got := s.finished(t, sc, again.ID, 15*time.Second); got.Status != payments.RefundSucceeded {
		t.Fatalf("second refund: got %+v, want succeeded", got)
	}
	s.checkRefundedOnce(t, sc, again.ID)
	checkBalance(t, "balance after the second refund", s.usdBalance(t, sc), 2*netPaid-amount, 0)
	checkPayment(t, "payment after the second refund", s.paymentMoney(t, pi), amount, 0)
	if r := s.readRefund(t, sc, r.ID); r.Status != payments.RefundFailed {
		t.Errorf("first refund at the end: got %q, want still failed", r.Status)
	}
}

func TestDisputeThroughQueue(t *testing.T) {
	s := newDeliveryStack(t)
	s.startMoneyWorker(t, nil, nil)
	for _, c := range []struct {
		evidence, want string
		reversal       int64
	}{
		{sandbox.EvidenceWinning, payments.DisputeWon, paid},
		{sandbox.EvidenceLosing, payments.DisputeLost, 0},
	} {
		t.Run(c.want, func(t *testing.T) {
			sc := payments.Scope{MerchantID: s.merchant(t, "Disputed shop")}
			before := time.Now()
			pi := s.pay(t, sc, sandbox.CardDispute, nil)
			d := s.waitDispute(t, sc, pi, 15*time.Second)
			s.checkDisputeOpened(t, pi, d, before, time.Now())
			checkBalance(t, "balance with the dispute open", s.usdBalance(t, sc), netPaid-paid, 0)

			submitted := submitEvidence(t, s.svc, sc, d.ID, c.evidence)
			d = s.waitDisputeDecided(t, sc, submitted.ID, 15*time.Second)
			s.checkDisputeClosed(t, d, c.want)
			if want := map[string]string{"uncategorized_text": c.evidence, "customer_name": "Jo Doe"}; !mapsEqual(d.Evidence, want) {
				t.Errorf("evidence: got %v, want %v", d.Evidence, want)
			}
			checkBalance(t, "balance after the decision", s.usdBalance(t, sc), netPaid-paid+c.reversal, 0)
			// Evidence is refused once submitted.
			text := "more"
			if _, err := s.svc.UpdateEvidence(context.Background(), sc, d.ID, payments.EvidenceInput{
				Evidence: map[string]string{"product_description": text},
			}); payments.ErrorCode(err) != payments.ValidationError {
				t.Errorf("evidence after the decision: got %v, want %s", err, payments.ValidationError)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestRelayReenqueuesStrandedMoneyWork(t *testing.T) {
	s := newDeliveryStack(t)
	ctx := context.Background()

	// With no worker: a pending refund, an unapplied processor event, and
	// a dispute whose submitted evidence has not reached the processor.
	refundSc := payments.Scope{MerchantID: s.merchant(t, "Stranded refund shop")}
	pis := s.fund(t, refundSc, 2)
	const amount = 700
	r := s.refund(t, refundSc, pis[0], amount)

	eventSc := payments.Scope{MerchantID: s.merchant(t, "Stranded dispute shop")}
	before := time.Now()
	eventPI := s.pay(t, eventSc, sandbox.CardDispute, nil)
	pev := s.processorEventOf(t, eventPI)

	evidenceSc := payments.Scope{MerchantID: s.merchant(t, "Stranded evidence shop")}
	evidencePI := s.pay(t, evidenceSc, sandbox.CardDispute, nil)
	appliedPev := s.processorEventOf(t, evidencePI)
	if err := s.svc.ApplyProcessorEvent(ctx, evidenceSc, appliedPev); err != nil {
		t.Fatalf("apply processor event: %v", err)
	}
	ds := s.disputesOf(t, evidenceSc, evidencePI)
	if len(ds) != 1 {
		t.Fatalf("disputes after ApplyProcessorEvent: got %d, want 1", len(ds))
	}
	dp := submitEvidence(t, s.svc, evidenceSc, ds[0].ID, sandbox.EvidenceWinning)

	stranded := []string{r.ID, pev, dp.ID}
	queued := s.pendingTasks(t, tasks.QueueCritical)
	for _, id := range stranded {
		if !queued[id] {
			t.Fatalf("before the flush: %s has no pending task, want one enqueued after commit", id)
		}
	}
	if err := testenv.Redis(t).FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if got := s.pendingTasks(t, tasks.QueueCritical); len(got) != 0 {
		t.Fatalf("after FlushDB: got %d pending tasks, want 0", len(got))
	}

	n, err := worker.RelayOnce(ctx, s.store, s.enq, time.Now(), 0)
	if err != nil {
		t.Fatalf("RelayOnce: %v", err)
	}
	if n < len(stranded) {
		t.Errorf("RelayOnce: got %d enqueued, want at least %d", n, len(stranded))
	}
	queued = s.pendingTasks(t, tasks.QueueCritical)
	for _, id := range stranded {
		if !queued[id] {
			t.Errorf("after RelayOnce: %s has no pending task, want one", id)
		}
	}
	if queued[appliedPev] {
		t.Errorf("after RelayOnce: the applied processor event %s was re-enqueued, want it left alone", appliedPev)
	}
	for id, typ := range map[string]string{r.ID: tasks.TypeExecuteRefund, pev: tasks.TypeProcessorEvent, dp.ID: tasks.TypeSubmitEvidence} {
		if info := s.criticalTask(t, id); info.Type != typ {
			t.Errorf("relayed task %s: got type %q, want %q", id, info.Type, typ)
		}
	}
	if again, err := worker.RelayOnce(ctx, s.store, s.enq, time.Now(), 0); err != nil || again != 0 {
		t.Errorf("second RelayOnce: got %d enqueued, %v, want 0, nil (tasks still queued)", again, err)
	}

	s.startMoneyWorker(t, nil, nil)
	if got := s.finished(t, refundSc, r.ID, 15*time.Second); got.Status != payments.RefundSucceeded {
		t.Fatalf("relayed refund: got %+v, want succeeded", got)
	}
	s.checkRefundedOnce(t, refundSc, r.ID)
	checkBalance(t, "balance after the relayed refund", s.usdBalance(t, refundSc), 2*netPaid-amount, 0)
	checkPayment(t, "payment after the relayed refund", s.paymentMoney(t, pis[0]), amount, 0)

	d := s.waitDispute(t, eventSc, eventPI, 15*time.Second)
	s.checkDisputeOpened(t, eventPI, d, before, time.Now())
	checkBalance(t, "balance after the relayed processor event", s.usdBalance(t, eventSc), netPaid-paid, 0)

	won := s.waitDisputeDecided(t, evidenceSc, dp.ID, 15*time.Second)
	s.checkDisputeClosed(t, won, payments.DisputeWon)
	checkBalance(t, "balance after the relayed evidence", s.usdBalance(t, evidenceSc), netPaid, 0)

	// Nothing is left for the relay of these rows.
	jobs, err := tasks.StrandedJobs(ctx, s.store, time.Now(), 10000)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if slices.Contains(stranded, j.ID) {
			t.Errorf("StrandedJobs at the end: got %+v, want none of %v", j, stranded)
		}
	}
}

func TestExecuteRefundIdempotent(t *testing.T) {
	s := newDeliveryStack(t)
	ctx := context.Background()
	sc := payments.Scope{MerchantID: s.merchant(t, "Twice shop")}
	pis := s.fund(t, sc, 3)
	proc := &scriptedProcessor{}
	svc := s.scriptedService(proc)

	// No worker yet: the handlers' work is done by direct calls first.
	const amount = 1000
	seq := s.refund(t, sc, pis[0], amount)
	conc := s.refund(t, sc, pis[1], amount)
	checkBalance(t, "balance with two refunds pending", s.usdBalance(t, sc), 3*netPaid, 2*amount)

	t.Run("sequential", func(t *testing.T) {
		for i := range 3 {
			r, err := svc.ExecuteRefund(ctx, sc, seq.ID)
			if err != nil || r.Status != payments.RefundSucceeded {
				t.Fatalf("ExecuteRefund #%d: got %q, %v, want succeeded, nil", i+1, r.Status, err)
			}
		}
		if n := len(proc.callsOf(seq.ID)); n != 1 {
			t.Errorf("processor calls: got %d, want 1 (a finished refund is not sent again)", n)
		}
		s.checkRefundedOnce(t, sc, seq.ID)
		checkPayment(t, "payment", s.paymentMoney(t, pis[0]), amount, 0)
	})

	t.Run("concurrent", func(t *testing.T) {
		const n = 8
		start := make(chan struct{})
		type result struct {
			status string
			err    error
		}
		results := make(chan result, n)
		for range n {
			go func() {
				<-start
				r, err := svc.ExecuteRefund(ctx, sc, conc.ID)
				results <- result{r.Status, err}
			}()
		}
		close(start)
		for range n {
			if res := <-results; res.err != nil || res.status != payments.RefundSucceeded {
				t.Errorf("concurrent ExecuteRefund: got %q, %v, want succeeded, nil", res.status, res.err)
			}
		}
		t.Logf("%d of %d concurrent runs reached the processor", len(proc.callsOf(conc.ID)), n)
		s.checkRefundedOnce(t, sc, conc.ID)
		checkPayment(t, "payment", s.paymentMoney(t, pis[1]), amount, 0)
	})
	checkBalance(t, "balance after both refunds", s.usdBalance(t, sc), 3*netPaid-2*amount, 0)

	// The tasks enqueued at creation are still queued; a worker runs them
	// and, under other task ids, the same refunds once more.
	client := asynq.NewClient(s.redisOpt)
	defer client.Close()
	dupIDs := map[string]string{}
	for _, id := range []string{seq.ID, conc.ID} {
		if info := s.criticalTask(t, id); info.State != asynq.TaskStatePending {
			t.Fatalf("task %s: got state %v, want pending (enqueued at creation)", id, info.State)
		}
		dup := "again-" + id
		dupIDs[id] = dup
		payload := mustJSON(t, tasks.Ref{MerchantID: sc.MerchantID, ID: id})
		if _, err := client.EnqueueContext(ctx, asynq.NewTask(tasks.TypeExecuteRefund, payload, asynq.TaskID(dup),
			asynq.Queue(tasks.QueueCritical), asynq.MaxRetry(3), asynq.Retention(time.Hour))); err != nil {
			t.Fatalf("enqueue %s: %v", dup, err)
		}
	}
	s.startMoneyWorker(t, svc, nil)

	t.Run("through the queue again", func(t *testing.T) {
		for id, dup := range dupIDs {
			waitUntil(t, 15*time.Second, "task "+id+" done", func() (bool, string) {
				info, err := s.insp.GetTaskInfo(tasks.QueueCritical, id)
				if errors.Is(err, asynq.ErrTaskNotFound) {
					return true, "" // completed, not retained
				}
				if err != nil {
					return false, err.Error()
				}
				return false, fmt.Sprintf("state %v, last error %q", info.State, info.LastErr)
			})
			waitUntil(t, 15*time.Second, "task "+dup+" completed", func() (bool, string) {
				info, err := s.insp.GetTaskInfo(tasks.QueueCritical, dup)
				if err != nil {
					return false, err.Error()
				}
				return info.State == asynq.TaskStateCompleted && info.Retried == 0, fmt.Sprintf("state %v, retried %d, last error %q", info.State, info.Retried, info.LastErr)
			})
			s.checkRefundedOnce(t, sc, id)
		}
		checkBalance(t, "balance after the tasks ran again", s.usdBalance(t, sc), 3*netPaid-2*amount, 0)
	})

	dsc := payments.Scope{MerchantID: s.merchant(t, "Twice disputed shop")}
	before := time.Now()
	dpi := s.pay(t, dsc, sandbox.CardDispute, nil)
	var d payments.Dispute

	t.Run("processor event applied concurrently", func(t *testing.T) {
		pev := s.processorEventOf(t, dpi)
		const n = 8
		errs := make(chan error, n)
		start := make(chan struct{})
		for range n {
			go func() { <-start; errs <- svc.ApplyProcessorEvent(ctx, dsc, pev) }()
		}
		close(start)
		for range n {
			if err := <-errs; err != nil {
				t.Errorf("concurrent ApplyProcessorEvent: %v", err)
			}
		}
		// The worker applies it as well: still one dispute.
		d = s.waitDispute(t, dsc, dpi, 5*time.Second)
		s.checkDisputeOpened(t, dpi, d, before, time.Now())
	})

	t.Run("evidence not sent again", func(t *testing.T) {
		if d.ID == "" {
			t.Skip("no dispute")
		}
		// SendEvidence run again once it has recorded the decision (its
		// task redelivered) changes nothing and, as its doc says, does not
		// send the evidence again. The worker sends it first.
		submitEvidence(t, svc, dsc, d.ID, sandbox.EvidenceWinning)
		won := s.waitDisputeDecided(t, dsc, d.ID, 15*time.Second)
		for i := range 2 {
			got, err := svc.SendEvidence(ctx, dsc, d.ID)
			if err != nil || got.Status != payments.DisputeWon {
				t.Errorf("SendEvidence #%d after the decision: got %q, %v, want won, nil", i+1, got.Status, err)
			}
		}
		s.checkDisputeClosed(t, won, payments.DisputeWon)
		checkBalance(t, "balance after the won dispute", s.usdBalance(t, dsc), netPaid, 0)
		if got := proc.evidenceCalls(d.ID); got != 1 {
			t.Errorf("SubmitDisputeEvidence calls for %s: got %d, want 1 (evidence already sent is not sent again)", d.ID, got)
		}
	})
}
