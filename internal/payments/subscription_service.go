package payments

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"

	"paysvc/internal/processor"
)

// SubscriptionRecords is the persistence of subscriptions themselves (part
// of Store, beside SubscriptionStore's products).
type SubscriptionRecords interface {
	// CreateSubscription inserts a subscription with its items and eff.
	CreateSubscription(ctx context.Context, sc Scope, sub Subscription, eff Effects) error
	// Subscription reads one of the scope's subscriptions with its items.
	// Codes: subscription_not_found (also another merchant's or mode's).
	Subscription(ctx context.Context, sc Scope, id string) (Subscription, error)
	// Subscriptions is a page of the scope's subscriptions, newest first.
	// Codes: validation_error (starting_after not in the filtered list).
	Subscriptions(ctx context.Context, sc Scope, f SubscriptionFilter) (Page[Subscription], error)
	// UpdateSubscription locks the subscription, runs fn and saves it
	// (status, period, flags, pending proration, card, retry time and its
	// items' quantities) with fn's effects, in one transaction.
	// Codes: subscription_not_found, and fn's.
	UpdateSubscription(ctx context.Context, sc Scope, id string, fn func(*Subscription) (Effects, error)) (Subscription, error)
	// PaySubscriptionCheckout locks a subscription-mode session, runs fn
	// and inserts what fn returns (customer, saved card, subscription,
	// first charge and its payment), saves the session and writes fn's
	// effects, in one transaction.
	PaySubscriptionCheckout(ctx context.Context, sessionID string, fn func(sc Scope, plan Plan, cs *CheckoutSession) (SubscriptionCheckout, Effects, error)) error
	// SyncProcessorSubscription locks the scope's subscription whose
	// processor id is processorID, runs fn and writes the payment fn
	// returns, the subscription and fn's effects in one transaction.
	// Codes: subscription_not_found, and fn's.
	SyncProcessorSubscription(ctx context.Context, sc Scope, processorID string, fn func(plan Plan, sub *Subscription) (*PaymentIntent, Effects, error)) (Subscription, error)
}

// SubscriptionFilter is the query of GET /v1/subscriptions: Status ""
// means every status (status=all); CustomerID "" every customer.
type SubscriptionFilter struct {
	ListParams
	Status     string
	CustomerID string
}

// subscriptionStatuses are the statuses the list can filter on.
var subscriptionStatuses = []string{SubActive, SubTrialing, SubPastDue, SubUnpaid, SubCanceled, SubIncomplete, SubIncompleteExpired, SubPaused}

// SubscriptionQuery is GET /v1/subscriptions as asked, before parsing:
// each pointer is nil when the parameter is absent.
type SubscriptionQuery struct {
	ListParams
	LimitGiven    bool
	Status        *string
	Customer      *string
	Page          *string
	StartingAfter *string
}

// pageToken is what a next_page token carries: the filters and the cursor,
// so that passing it back as page continues the same list.
type pageToken struct {
	Status   string `json:"s"`
	Customer string `json:"c,omitempty"`
	Limit    int    `json:"l"`
	After    string `json:"a"`
}

// tokenID reports whether s can be an id with prefix: at most 255 bytes of
// ASCII letters, digits and underscores.
func tokenID(s, prefix string) bool {
	if !strings.HasPrefix(s, prefix) || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// ParseSubscriptionQuery turns the list's query into a filter. status
// defaults to active; "all" lifts it. page (a next_page token) carries the
// filters and the cursor: only limit may be given beside it.
// Codes: validation_error naming the parameter.
func ParseSubscriptionQuery(q SubscriptionQuery) (SubscriptionFilter, error) {
	f := SubscriptionFilter{ListParams: q.ListParams, Status: SubActive}
	if q.Page != nil {
		if q.Status != nil || q.Customer != nil || q.StartingAfter != nil {
			return f, Invalid("page", "(a next_page token) carries the list's filters and cursor: send it without status, customer and starting_after")
		}
		raw, err := base64.RawURLEncoding.DecodeString(*q.Page)
		var t pageToken
		if err == nil {
			err = json.Unmarshal(raw, &t)
		}
		// The token is decoded here, past the gate's checks of the raw
		// query: its ids are held to what an id can be (a JSON \u0000 is
		// a NUL PostgreSQL refuses as text).
		if err != nil || !tokenID(t.After, "sub_") || t.Limit < 1 || t.Limit > MaxLimit || (t.Status != "" && !knownStatus(t.Status)) ||
			(t.Customer != "" && !tokenID(t.Customer, "cus_")) {
			return f, Invalid("page", "is not a next_page token of this list")
		}
		f.Status, f.CustomerID, f.StartingAfter = t.Status, t.Customer, t.After
		if !q.LimitGiven {
			f.Limit = t.Limit
		}
		return f, nil
	}
	if q.Status != nil {
		switch v := *q.Status; {
		case v == "all":
			f.Status = ""
		case knownStatus(v):
			f.Status = v
		default:
			return f, Invalid("status", "must be one of %s or all", strings.Join(subscriptionStatuses, ", "))
		}
	}
	if q.Customer != nil {
		if !strings.HasPrefix(*q.Customer, "cus_") || len(*q.Customer) > 255 {
			return f, Invalid("customer", "must be a customer id (cus_…)")
		}
		f.CustomerID = *q.Customer
	}
	if q.StartingAfter != nil {
		f.StartingAfter = *q.StartingAfter
	}
	return f, nil
}

func knownStatus(s string) bool {
	for _, v := range subscriptionStatuses {
		if v == s {
			return true
		}
	}
	return false
}

// SubscriptionList is the list as the API returns it (decisions.md §2):
// NextPage is the token that, passed as page, returns the next page; null
// on the last one.
type SubscriptionList struct {
	Data     []SubscriptionObject `json:"data"`
	HasMore  bool                 `json:"has_more"`
	NextPage *string              `json:"next_page"`
}

// Subscriptions returns a page of the scope's subscriptions, newest first,
// with the token of the next. Codes: validation_error.
func (s *Service) Subscriptions(ctx context.Context, sc Scope, f SubscriptionFilter) (SubscriptionList, error) {
	p, err := s.store.Subscriptions(ctx, sc, f)
	if err != nil {
		return SubscriptionList{}, err
	}
	l := SubscriptionList{Data: make([]SubscriptionObject, 0, len(p.Data)), HasMore: p.HasMore}
	for _, sub := range p.Data {
		l.Data = append(l.Data, sub.Object())
	}
	if p.HasMore {
		raw, _ := json.Marshal(pageToken{Status: f.Status, Customer: f.CustomerID, Limit: f.Limit, After: p.Data[len(p.Data)-1].ID})
		tok := base64.RawURLEncoding.EncodeToString(raw)
		l.NextPage = &tok
	}
	return l, nil
}

// Subscription returns one of the scope's subscriptions.
// Codes: subscription_not_found.
func (s *Service) Subscription(ctx context.Context, sc Scope, id string) (Subscription, error) {
	return s.store.Subscription(ctx, sc, id)
}

// subscriptionEvents are the events of a change to sub: every change
// records customer.subscription.updated, and a change that ended it
// customer.subscription.deleted after it (the end is when Stripe sends it).
func subscriptionEvents(sub Subscription, wasEnded bool, now time.Time) []Event {
	obj := sub.Object()
	evs := []Event{newEvent(EventSubscriptionUpdated, obj, now)}
	if sub.Ended() && !wasEnded {
		evs = append(evs, newEvent(EventSubscriptionDeleted, obj, now))
	}
	return evs
}

// changeSubscription runs change on the locked subscription at its scope's
// time and, when change reports a change, saves it with its events
// (subscriptionEvents). Codes: subscription_not_found, and change's.
//
// remote, when not nil, makes the same change at the processor for a
// subscription the processor bills (Stripe Billing), after change
// succeeded on the locked row and before anything is written, with the id
// of the customer.subscription.updated event this change records as the
// idempotency key: a processor error (502 processor_error) leaves nothing
// written here.
func (s *Service) changeSubscription(ctx context.Context, sc Scope, id string, change func(sub *Subscription, now time.Time) (bool, error),
	remote func(b processor.Billing, sub Subscription, key string) error) (Subscription, error) {
	// The time is read before the store's transaction opens: a clock whose
	// cached offset ran out reads it from the database, and doing that
	// inside the transaction would need a second connection while holding
	// one (enough of those at once exhaust the pool and wait forever).
	now := s.clock.Now(ctx, sc)
	return s.store.UpdateSubscription(ctx, sc, id, func(sub *Subscription) (Effects, error) {
		wasEnded := sub.Ended()
		changed, err := change(sub, now)
		if err != nil || !changed {
			return Effects{}, err
		}
		evs := subscriptionEvents(*sub, wasEnded, now)
		if b, ok := s.billingOf(*sub); ok && remote != nil {
			err := s.callInTx("subscription change", func() error { return remote(b, *sub, evs[0].ID) })
			if err != nil {
				return Effects{}, err
			}
		}
		return Effects{Events: evs}, nil
	})
}

// CancelInput is the body of POST /v1/subscriptions/{id}/cancel.
type CancelInput struct {
	AtPeriodEnd *bool `json:"at_period_end"`
}

// CancelSubscription cancels at the end of the current period (the
// default, cancel_at_period_end true) or now (at_period_end false:
// canceled, canceled_at and ended_at now). Scheduling an already scheduled
// cancellation changes nothing and records no event.
// Codes: subscription_not_found, validation_error (already ended, or an
// incomplete subscription asked to end at period end).
func (s *Service) CancelSubscription(ctx context.Context, sc Scope, id string, in CancelInput) (Subscription, error) {
	atPeriodEnd := in.AtPeriodEnd == nil || *in.AtPeriodEnd
	return s.changeSubscription(ctx, sc, id, func(sub *Subscription, now time.Time) (bool, error) {
		return sub.Cancel(atPeriodEnd, now)
	}, func(b processor.Billing, sub Subscription, key string) error {
		return b.CancelSubscription(ctx, account(sc), processor.SubscriptionCancel{Key: key, SubscriptionID: sub.ID, AtPeriodEnd: atPeriodEnd})
	})
}

// ResumeSubscription clears a scheduled cancellation of a subscription
// that has not ended. Codes: subscription_not_found, validation_error
// (nothing scheduled, or ended).
func (s *Service) ResumeSubscription(ctx context.Context, sc Scope, id string) (Subscription, error) {
	return s.changeSubscription(ctx, sc, id, func(sub *Subscription, now time.Time) (bool, error) {
		return true, sub.Resume(now)
	}, func(b processor.Billing, sub Subscription, key string) error {
		return b.ResumeSubscription(ctx, account(sc), key, sub.ID)
	})
}
