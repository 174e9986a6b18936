package payments

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"

	"paysvc/internal/processor"
)

// The customer portal (issue 12, item 7): POST
// /v1/subscriptions/{id}/portal-session gives a merchant a URL it hands to
// its customer; the page behind it shows that one subscription and lets
// the customer update the card or cancel at the period's end.
//
// The URL is the capability, as Stripe's billing portal URLs are:
// {PUBLIC_BASE_URL}/portal/{bps_id}.{mac}, mac an HMAC-SHA256 under
// PORTAL_SIGNING_KEY of everything the session is bound to (its id,
// merchant, mode, subscription, customer and expiry), all read back from
// the stored row. So a token whose id or mac was changed, one signed under
// another key, or one whose row was altered, verifies as nothing; the
// expiry is judged on the merchant's clock.

// PortalSession is a stored portal session.
type PortalSession struct {
	ID             string
	Scope          Scope
	SubscriptionID string
	CustomerID     string
	ReturnURL      string
	ExpiresAt      time.Time
	Created        time.Time
	MerchantName   string // read back for the page; not part of what is signed
}

// PortalSessions is the persistence of portal sessions (part of Store).
type PortalSessions interface {
	CreatePortalSession(ctx context.Context, sc Scope, ps PortalSession) error
	// PortalSessionByID reads a session by id alone (the page has no API
	// key), with its scope; ErrPortalNotFound when there is none.
	PortalSessionByID(ctx context.Context, id string) (PortalSession, error)
	// PortalCard reads the saved card a subscription's charges use, for
	// the page. Codes: payment_not_found (no such card in the scope).
	PortalCard(ctx context.Context, sc Scope, cardID string) (SavedCard, error)
	// ReplaceSubscriptionCard saves card for the subscription's customer,
	// then locks the subscription, runs fn and saves it with fn's effects,
	// in one transaction. Codes: subscription_not_found, and fn's.
	ReplaceSubscriptionCard(ctx context.Context, sc Scope, id string, card SavedCard, fn func(*Subscription) (Effects, error)) (Subscription, error)
}

// portal holds the portal's settings (WithPortal).
type portal struct {
	key     []byte
	ttl     time.Duration
	baseURL string
}

// WithPortal sets the key that signs portal URLs, how long they last and
// the public base URL they start with. Without it (tests that never open
// the portal) the portal refuses to create sessions.
func WithPortal(key []byte, ttl time.Duration, baseURL string) Option {
	return func(s *Service) {
		s.portal = portal{key: append([]byte(nil), key...), ttl: ttl, baseURL: strings.TrimRight(baseURL, "/")}
	}
}

// PortalSessionInput is the body of POST /v1/subscriptions/{id}/portal-session.
type PortalSessionInput struct {
	ReturnURL *string `json:"return_url"`
}

// PortalSessionObject is a portal session as the API returns it
// (decisions.md §2: id, url, expires_at; the rest as Stripe's
// billing_portal.session has them).
type PortalSessionObject struct {
	ID           string `json:"id"`
	Object       string `json:"object"`
	URL          string `json:"url"`
	ReturnURL    string `json:"return_url"`
	Subscription string `json:"subscription"`
	Customer     string `json:"customer"`
	ExpiresAt    int64  `json:"expires_at"`
	Created      int64  `json:"created"`
	Livemode     bool   `json:"livemode"`
}

// ProcessorPortalTTL is how long the processor's portal URL is recorded as
// valid: Stripe's billing portal session URLs are short-lived, and its
// session then lasts while the customer uses it.
const ProcessorPortalTTL = 5 * time.Minute

// CreatePortalSession creates a portal session for one of the scope's
// subscriptions and returns it with its signed URL, valid for the
// configured TTL on the merchant's clock. An ended subscription still gets
// one: its customer can see it, with nothing left to change.
// Codes: validation_error (return_url missing), invalid_url (not https),
// subscription_not_found (also another merchant's or mode's).
func (s *Service) CreatePortalSession(ctx context.Context, sc Scope, subscriptionID string, in PortalSessionInput) (PortalSessionObject, error) {
	if err := checkRedirectURL("return_url", in.ReturnURL); err != nil {
		return PortalSessionObject{}, err
	}
	sub, err := s.store.Subscription(ctx, sc, subscriptionID)
	if err != nil {
		return PortalSessionObject{}, err
	}
	b, owned := s.billingOf(sub)
	if len(s.portal.key) == 0 && !owned {
		return PortalSessionObject{}, errors.New("portal: no signing key configured (payments.WithPortal)")
	}
	now := s.clock.Now(ctx, sc).UTC().Truncate(time.Second)
	ps := PortalSession{
		ID: NewID("bps_"), Scope: sc, SubscriptionID: sub.ID, CustomerID: sub.CustomerID,
		ReturnURL: *in.ReturnURL, ExpiresAt: now.Add(s.portal.ttl), Created: now,
	}
	var url string
	if owned {
		ps.ExpiresAt = now.Add(ProcessorPortalTTL)
		// The processor's billing portal (Stripe's), keyed by our session's
		// id; the row is written only once it answered.
		if url, err = b.CreatePortalSession(ctx, account(sc), processor.PortalSession{ID: ps.ID, SubscriptionID: sub.ID, ReturnURL: ps.ReturnURL}); err != nil {
			return PortalSessionObject{}, err
		}
	} else {
		url = s.portal.baseURL + "/portal/" + s.portalToken(ps)
	}
	if err := s.store.CreatePortalSession(ctx, sc, ps); err != nil {
		return PortalSessionObject{}, err
	}
	return PortalSessionObject{
		ID: ps.ID, Object: "billing_portal.session", URL: url,
		ReturnURL: ps.ReturnURL, Subscription: ps.SubscriptionID, Customer: ps.CustomerID,
		ExpiresAt: ps.ExpiresAt.Unix(), Created: ps.Created.Unix(), Livemode: sc.Live,
	}, nil
}

// mac is the HMAC-SHA256 under the portal's key of parts, each
// length-prefixed so that no two different lists sign the same bytes.
func (p portal) mac(parts ...string) []byte {
	m := hmac.New(sha256.New, p.key)
	for _, part := range parts {
		m.Write([]byte(strconv.Itoa(len(part)) + ":" + part))
	}
	return m.Sum(nil)
}

// binding is what a portal URL signs: the session and everything it is
// bound to. The purpose string keeps these macs apart from form tokens.
func (ps PortalSession) binding() []string {
	return []string{"portal-url/v1", ps.ID, ps.Scope.MerchantID, strconv.FormatBool(ps.Scope.Live),
		ps.SubscriptionID, ps.CustomerID, strconv.FormatInt(ps.ExpiresAt.Unix(), 10)}
}

func (s *Service) portalToken(ps PortalSession) string {
	return ps.ID + "." + base64.RawURLEncoding.EncodeToString(s.portal.mac(ps.binding()...))
}

// The portal page's failures. Neither carries any data: the page that
// shows them must not tell one merchant's session from another's.
var (
	// ErrPortalNotFound: the token is malformed, tampered with, signed
	// under another key, or names no session (or one whose subscription is
	// no longer its customer's).
	ErrPortalNotFound = errors.New("portal session not found")
	// ErrPortalExpired: a genuine token past its expiry on its merchant's clock.
	ErrPortalExpired = errors.New("portal session expired")
)

// PortalView is what a portal page shows: the verified session, its
// subscription and the saved card its charges use (nil when none).
type PortalView struct {
	Session      PortalSession
	Subscription Subscription
	Card         *SavedCard
	Now          time.Time // the merchant's time the page was judged at
}

// Portal verifies a portal token and returns what its page shows.
// Errors: ErrPortalNotFound, ErrPortalExpired; anything else is internal.
func (s *Service) Portal(ctx context.Context, token string) (PortalView, error) {
	ps, err := s.verifyPortal(ctx, token)
	if err != nil {
		return PortalView{}, err
	}
	return s.portalView(ctx, ps)
}

// verifyPortal checks the token's mac against its stored session and the
// session's expiry on its merchant's clock.
func (s *Service) verifyPortal(ctx context.Context, token string) (PortalSession, error) {
	id, _, ok := strings.Cut(token, ".")
	if !ok || !strings.HasPrefix(id, "bps_") || len(s.portal.key) == 0 {
		return PortalSession{}, ErrPortalNotFound
	}
	ps, err := s.store.PortalSessionByID(ctx, id)
	if err != nil {
		return PortalSession{}, err
	}
	// The whole token is compared, as text: base64 ignores a last
	// character's spare bits, so decoding first would accept several
	// spellings of one signature.
	if !hmac.Equal([]byte(token), []byte(s.portalToken(ps))) {
		return PortalSession{}, ErrPortalNotFound
	}
	if !s.clock.Now(ctx, ps.Scope).Before(ps.ExpiresAt) {
		return PortalSession{}, ErrPortalExpired
	}
	return ps, nil
}

func (s *Service) portalView(ctx context.Context, ps PortalSession) (PortalView, error) {
	sub, err := s.store.Subscription(ctx, ps.Scope, ps.SubscriptionID)
	if ErrorCode(err) == SubscriptionNotFound {
		return PortalView{}, ErrPortalNotFound
	}
	if err != nil {
		return PortalView{}, err
	}
	// Bound to the customer too: the page shows the subscription only to
	// the customer the session was made for.
	if sub.CustomerID != ps.CustomerID {
		return PortalView{}, ErrPortalNotFound
	}
	v := PortalView{Session: ps, Subscription: sub, Now: s.clock.Now(ctx, ps.Scope)}
	if sub.CardID != nil {
		card, err := s.store.PortalCard(ctx, ps.Scope, *sub.CardID)
		switch {
		case err == nil:
			v.Card = &card
		case ErrorCode(err) != PaymentNotFound: // a card the sandbox does not keep (Stripe's) is simply not shown
			return PortalView{}, err
		}
	}
	return v, nil
}

// PortalFormToken is the token a portal page's forms carry: an HMAC of the
// session and nonce, a random value the page keeps in a SameSite=Strict
// cookie. A form posted from another site carries neither the cookie nor a
// token it could compute, so the URL's capability alone cannot be replayed
// by a page that merely learned it.
func (s *Service) PortalFormToken(v PortalView, nonce string) string {
	return base64.RawURLEncoding.EncodeToString(s.portal.mac("portal-form/v1", v.Session.ID, nonce))
}

// ValidPortalForm reports whether got is the form token of v and nonce.
func (s *Service) ValidPortalForm(v PortalView, nonce, got string) bool {
	if nonce == "" || got == "" {
		return false
	}
	want := s.PortalFormToken(v, nonce)
	return hmac.Equal([]byte(got), []byte(want))
}

// PortalCancel schedules the cancellation of the portal's subscription at
// the end of its period, through the same domain method as POST
// /v1/subscriptions/{id}/cancel (customer.subscription.updated recorded;
// nothing when already scheduled). It re-verifies the token: the page may
// have been left open past its expiry.
// Errors: ErrPortalNotFound, ErrPortalExpired, validation_error (ended).
func (s *Service) PortalCancel(ctx context.Context, token string) error {
	ps, err := s.verifyPortal(ctx, token)
	if err != nil {
		return err
	}
	if _, err := s.portalView(ctx, ps); err != nil { // still its customer's
		return err
	}
	atPeriodEnd := true
	_, err = s.CancelSubscription(ctx, ps.Scope, ps.SubscriptionID, CancelInput{AtPeriodEnd: &atPeriodEnd})
	return err
}

// PortalUpdateCard makes card (saved by the processor, never a number) the
// card of the portal's subscription, recording customer.subscription.updated
// (Stripe sends it when the default payment method changes). A past_due or
// unpaid subscription's open charge is then retried at once
// (RetryOpenCharge); retried reports whether it was, paid whether that
// charge succeeded. Errors: ErrPortalNotFound, ErrPortalExpired,
// validation_error (the subscription has ended).
func (s *Service) PortalUpdateCard(ctx context.Context, token string, card SavedCard) (retried, paid bool, err error) {
	ps, err := s.verifyPortal(ctx, token)
	if err != nil {
		return false, false, err
	}
	if _, err := s.portalView(ctx, ps); err != nil { // still its customer's
		return false, false, err
	}
	now := s.clock.Now(ctx, ps.Scope) // before the transaction: see changeSubscription
	sub, err := s.store.ReplaceSubscriptionCard(ctx, ps.Scope, ps.SubscriptionID, card, func(sub *Subscription) (Effects, error) {
		if sub.Ended() {
			return Effects{}, notAllowed("The subscription has ended (%s); its card can no longer change.", sub.Status)
		}
		sub.CardID = &card.ID
		return Effects{Events: subscriptionEvents(*sub, false, now)}, nil
	})
	if err != nil {
		return false, false, err
	}
	if sub.Status != SubPastDue && sub.Status != SubUnpaid {
		return false, false, nil
	}
	// After the card's transaction: the retry calls the processor.
	after, err := s.RetryOpenCharge(ctx, ps.Scope, ps.SubscriptionID)
	if ErrorCode(err) == ValidationError { // no open charge to retry
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return true, after.Status == SubActive, nil
}
