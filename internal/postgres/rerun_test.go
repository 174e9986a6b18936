package postgres_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"paysvc/internal/payments"
	"paysvc/internal/postgres"
	"paysvc/internal/testenv"
)

// TestWritesWhoseReplyIsLost: each write that runs outside a transaction,
// when the connection breaks after PostgreSQL committed it and before its
// reply reached the API, answers as it would have, done once (rerun.go:
// database/sql runs such a statement again on another connection). A
// creation is not an error for a row it wrote; a deletion is not a 404 for
// the customer it deleted; a rotation keeps the replaced secret for its
// grace period; a delivery's success is not an error; the sandbox clock
// does not move twice.
func TestWritesWhoseReplyIsLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	lost := loseReplies(t, testenv.DatabaseURL(t))
	db, err := postgres.OpenMode(ctx, lost.url, 4, testenv.PoolMode(), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	store := postgres.New(db) // its replies can be lost
	direct := testenv.DB(t)
	setup := postgres.New(direct)

	now := time.Now().Truncate(time.Microsecond)
	m := payments.Merchant{ID: payments.NewID("mch_"), Name: t.Name(), Plan: payments.PlanFree, Created: now}
	if err := setup.CreateMerchant(ctx, m); err != nil {
		t.Fatal(err)
	}
	sc := payments.Scope{MerchantID: m.ID}
	newCustomer := func() payments.Customer {
		c := payments.Customer{ID: payments.NewID("cus_"), Email: ptr("a@example.com"), Created: now}
		if err := setup.CreateCustomer(ctx, sc, c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	cus := newCustomer()
	iv, _ := payments.UnitInterval(payments.Month, nil)
	sub := payments.Subscription{
		ID: payments.NewID("sub_"), CustomerID: cus.ID, Status: payments.SubActive, Currency: "usd", Anchor: now,
		CurrentPeriodStart: now, CurrentPeriodEnd: payments.PeriodEnd(now, iv, 1),
		Items: []payments.SubscriptionItem{{ID: payments.NewID("si_"), Name: "Plan", Quantity: 1,
			Price: payments.RecurringPrice{ID: payments.NewID("price_"), Amount: 1500, Currency: "usd", Interval: iv}}},
		Created: now,
	}
	if err := setup.CreateSubscription(ctx, sc, sub, payments.Effects{}); err != nil {
		t.Fatal(err)
	}
	newUser := func() payments.User {
		return payments.User{ID: payments.NewID("usr_"), MerchantID: m.ID, Role: payments.RoleAdmin, Created: now,
			Email: strings.ToLower(payments.NewID("u")) + "@example.com"}
	}

	inserted := func(tag string) bool { return tag == "INSERT 0 1" }
	updated := func(tag string) bool { return tag == "UPDATE 1" }
	cases := []struct {
		name  string
		tag   func(string) bool
		write func() error // through the connections whose reply is lost
		check func() error // read directly
	}{
		{name: "merchant", tag: inserted, write: func() error {
			m2 := payments.Merchant{ID: payments.NewID("mch_"), Name: "second", Plan: payments.PlanFree, Created: now}
			if err := store.CreateMerchant(ctx, m2); err != nil {
				return err
			}
			_, err := setup.Merchant(ctx, m2.ID)
			return err
		}},
		{name: "customer", tag: inserted, write: func() error {
			c := payments.Customer{ID: payments.NewID("cus_"), Name: ptr("Ann"), Created: now}
			if err := store.CreateCustomer(ctx, sc, c); err != nil {
				return err
			}
			_, err := setup.Customer(ctx, sc, c.ID)
			return err
		}},
		{name: "checkout session", tag: inserted, write: func() error {
			cs := payments.CheckoutSession{ID: payments.NewID("cs_"), Status: payments.SessionOpen, PaymentStatus: payments.PaymentUnpaid,
				Currency: "usd", AmountSubtotal: 100, AmountTotal: 100, SuccessURL: "https://shop.example/ok",
				CancelURL: "https://shop.example/no", ExpiresAt: now.Add(time.Hour), Created: now}
			if err := store.CreateSession(ctx, sc, cs); err != nil {
				return err
			}
			_, err := setup.Session(ctx, sc, cs.ID)
			return err
		}},
		{name: "subscription product", tag: inserted, write: func() error {
			p := payments.SubscriptionProduct{ID: payments.NewID("prod_"), Name: "Plan", Active: true, Created: now,
				Price: payments.RecurringPrice{ID: payments.NewID("price_"), Amount: 900, Currency: "usd", Interval: iv}}
			if err := store.CreateSubscriptionProduct(ctx, sc, p); err != nil {
				return err
			}
			_, err := setup.SubscriptionProduct(ctx, sc, p.ID)
			return err
		}},
		{name: "quantity preview", tag: inserted, write: func() error {
			p := payments.QuantityPreview{ID: payments.NewID("sqp_"), ExpiresAt: now.Add(time.Hour), Created: now,
				Change: payments.QuantityChange{SubscriptionID: sub.ID, ItemID: sub.Items[0].ID, OldQuantity: 1, NewQuantity: 2}}
			if err := store.CreateQuantityPreview(ctx, sc, p); err != nil {
				return err
			}
			return oneRow(direct, `SELECT count(*) FROM subscription_quantity_previews WHERE id = $1`, p.ID)
		}},
		{name: "portal session", tag: inserted, write: func() error {
			ps := payments.PortalSession{ID: payments.NewID("bps_"), SubscriptionID: sub.ID, CustomerID: cus.ID,
				ReturnURL: "https://shop.example/account", ExpiresAt: now.Add(time.Hour), Created: now}
			if err := store.CreatePortalSession(ctx, sc, ps); err != nil {
				return err
			}
			_, err := setup.PortalSessionByID(ctx, ps.ID)
			return err
		}},
		{name: "dashboard user", tag: inserted, write: func() error {
			u := newUser()
			if err := store.CreateUser(ctx, u, []byte("$2a$hash")); err != nil {
				return err
			}
			_, _, err := setup.UserByEmail(ctx, u.Email)
			return err
		}},
		{name: "dashboard session", tag: inserted, write: func() error {
			u := newUser()
			if err := setup.CreateUser(ctx, u, []byte("$2a$hash")); err != nil {
				return err
			}
			token := sha256.Sum256([]byte(payments.NewID("tok_")))
			ds := payments.DashboardSession{User: u, CSRFToken: "csrf", ExpiresAt: now.Add(time.Hour)}
			if err := store.CreateDashboardSession(ctx, token[:], ds, now); err != nil {
				return err
			}
			_, err := setup.DashboardSession(ctx, token[:], now)
			return err
		}},
		{name: "customer deletion", tag: updated, write: func() error {
			c := newCustomer()
			if err := store.DeleteCustomer(ctx, sc, c.ID, time.Now()); err != nil {
				return err
			}
			if _, err := setup.Customer(ctx, sc, c.ID); payments.ErrorCode(err) != payments.CustomerNotFound {
				return fmt.Errorf("read after the deletion: %v, want customer_not_found", err)
			}
			return nil
		}},
		{name: "secret rotation", tag: updated, write: func() error {
			ep := payments.Endpoint{ID: payments.NewID("we_"), URL: "https://shop.example/hook", Events: []string{"*"},
				Status: payments.EndpointEnabled, Created: now}
			if err := setup.CreateEndpoint(ctx, sc, ep, []byte("first"), 16); err != nil {
				return err
			}
			if _, err := store.RotateEndpointSecret(ctx, sc, ep.ID, []byte("second"), time.Hour); err != nil {
				return err
			}
			var secret, previous []byte
			err := direct.QueryRowContext(ctx, `SELECT secret_sealed, previous_secret_sealed FROM webhook_endpoints WHERE id = $1`,
				ep.ID).Scan(&secret, &previous)
			if err != nil {
				return err
			}
			if !bytes.Equal(secret, []byte("second")) || !bytes.Equal(previous, []byte("first")) {
				return fmt.Errorf("secret %q, previous %q; want second, first", secret, previous)
			}
			return nil
		}},
		{name: "delivery's success", tag: func(tag string) bool { return tag == "SELECT 1" }, write: func() error {
			ep := payments.Endpoint{ID: payments.NewID("we_"), URL: "https://shop.example/hook", Events: []string{"*"},
				Status: payments.EndpointEnabled, Created: now}
			if err := setup.CreateEndpoint(ctx, sc, ep, []byte("secret"), 16); err != nil {
				return err
			}
			_, whd := insertOldEvent(t, direct, sc, ep.ID, now, payments.DeliveryPending) // with a failed attempt
			d := payments.Delivery{ID: whd, MerchantID: m.ID, EndpointID: ep.ID, EventCreated: now}
			a := payments.DeliveryAttempt{ID: payments.NewID("wha_"), At: time.Now(), HTTPStatus: 200, ResponseBody: "thanks"}
			if _, err := store.RecordAttempt(ctx, d, a, payments.DisableReason); err != nil {
				return err
			}
			return oneRow(direct, `SELECT count(*) FROM webhook_deliveries WHERE id = $1 AND status = 'succeeded' AND attempts = 1
				AND (SELECT count(*) FROM webhook_attempts WHERE delivery_id = $1) = 2`, whd)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := lost.dropped.Load()
			lost.arm(c.tag)
			if err := c.write(); err != nil {
				t.Error(err)
			}
			if lost.dropped.Load() == before {
				t.Error("no reply was lost")
			}
		})
	}

	// The clock adds to its offset: in a transaction, a lost reply is an
	// error, never a second move, whether the statement's or the commit's.
	for _, tag := range []string{"INSERT 0 1", "COMMIT"} {
		t.Run("clock advance, "+tag, func(t *testing.T) {
			csc := payments.Scope{MerchantID: m.ID, Live: tag == "COMMIT"}
			before := lost.dropped.Load()
			lost.arm(func(got string) bool { return got == tag })
			_, err := store.AdvanceClock(ctx, csc, time.Hour)
			if lost.dropped.Load() == before {
				t.Error("no reply was lost")
			}
			off, rerr := setup.ClockOffset(ctx, csc)
			switch {
			case rerr != nil:
				t.Fatal(rerr)
			case off != 0 && off != time.Hour:
				t.Errorf("the clock moved %v for one advance of 1h", off)
			case err == nil && off != time.Hour:
				t.Errorf("advance reported done, clock at %v", off)
			}
		})
	}
}

// oneRow checks that q counts one row.
func oneRow(db *sqlx.DB, q string, args ...any) error {
	var n int
	if err := db.Get(&n, q, args...); err != nil {
		return err
	}
	if n != 1 {
		return fmt.Errorf("%d rows, want 1", n)
	}
	return nil
}

// lostReply forwards connections to PostgreSQL and, when armed, breaks
// the one whose reply carries a command tag its trigger matches: the
// reply is held until the server's ReadyForQuery, which it sends after
// the commit, and then both ends are closed instead. It disarms itself.
type lostReply struct {
	url     string
	trigger atomic.Pointer[func(tag string) bool]
	dropped atomic.Int32
}

func loseReplies(t *testing.T, serverURL string) *lostReply {
	t.Helper()
	l := &lostReply{}
	l.url = testenv.Forward(t, serverURL, func(client, server net.Conn) {
		go func() { _, _ = io.Copy(server, client); server.Close() }()
		l.replies(client, server)
	})
	return l
}

// arm makes the next reply whose tag matches the one lost.
func (l *lostReply) arm(match func(tag string) bool) { l.trigger.Store(&match) }

// insertOf matches an INSERT of at least min rows.
func insertOf(min int) func(string) bool {
	return func(tag string) bool {
		rows, ok := strings.CutPrefix(tag, "INSERT 0 ")
		n, _ := strconv.Atoi(rows)
		return ok && n >= min
	}
}

// replies forwards the server's messages to the client a reply at a time
// (up to ReadyForQuery; authentication requests at once).
func (l *lostReply) replies(client, server net.Conn) {
	r := bufio.NewReader(server)
	var reply []byte
	var hit *func(string) bool
	for {
		typ, msg, err := testenv.ReadMessage(r)
		if err != nil {
			_, _ = client.Write(reply)
			return
		}
		reply = append(reply, msg...)
		if f := l.trigger.Load(); typ == 'C' && f != nil && (*f)(strings.TrimRight(string(msg[5:]), "\x00")) {
			hit = f
		}
		if typ != 'Z' && typ != 'R' {
			continue
		}
		if typ == 'Z' && hit != nil && l.trigger.CompareAndSwap(hit, nil) {
			l.dropped.Add(1)
			return // committed; the reply never arrives
		}
		hit = nil
		if _, err := client.Write(reply); err != nil {
			return
		}
		reply = reply[:0]
	}
}

func ptr[T any](v T) *T { return &v }
