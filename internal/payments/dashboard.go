package payments

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Role is what a dashboard user may do: an admin changes things, a viewer
// only reads.
type Role string

// The dashboard roles.
const (
	RoleAdmin  Role = "admin"
	RoleViewer Role = "viewer"
)

// User is a person who signs in to a merchant's dashboard.
type User struct {
	ID         string    `json:"id"`
	MerchantID string    `json:"merchant_id"`
	Email      string    `json:"email"`
	Role       Role      `json:"role"`
	Created    time.Time `json:"-"`
}

// CanChange reports whether the user may change anything (create or revoke
// keys, refund, submit evidence …); a viewer sees everything but changes
// nothing.
func (u User) CanChange() bool { return u.Role == RoleAdmin }

// DashboardSession is a signed-in browser: its user, the token its forms
// carry against cross-site requests, and when it ends.
type DashboardSession struct {
	User      User
	CSRFToken string
	ExpiresAt time.Time
}

// CheckCSRF reports whether token is the session's, in constant time.
func (ds DashboardSession) CheckCSRF(token string) bool {
	return token != "" && subtle.ConstantTimeCompare([]byte(token), []byte(ds.CSRFToken)) == 1
}

// DayVolume is the amount of the payments that succeeded on one UTC day,
// in one currency (gross: before fees).
type DayVolume struct {
	Day      time.Time `db:"day"`
	Currency string    `db:"currency"`
	Amount   int64     `db:"amount"`
	Count    int       `db:"count"`
}

// DashboardStore is what the dashboard needs of storage beside the rest of
// Store.
type DashboardStore interface {
	// CreateUser inserts a user; validation_error when the email is taken.
	CreateUser(ctx context.Context, u User, passwordHash []byte) error
	// UserByEmail returns the user and its password hash;
	// ErrBadCredentials when there is none.
	UserByEmail(ctx context.Context, email string) (User, []byte, error)
	CreateDashboardSession(ctx context.Context, tokenHash []byte, ds DashboardSession, now time.Time) error
	// DashboardSession returns the session of a token hash unless it
	// expired by now; ErrNoSession otherwise.
	DashboardSession(ctx context.Context, tokenHash []byte, now time.Time) (DashboardSession, error)
	DeleteDashboardSession(ctx context.Context, tokenHash []byte) error

	// Keys are the merchant's keys of one mode, newest first.
	Keys(ctx context.Context, merchantID string, live bool) ([]APIKey, error)
	// RevokeMerchantKey revokes one of the merchant's keys (validation_error
	// for any other id, the merchant's keys only).
	RevokeMerchantKey(ctx context.Context, merchantID, id string, now time.Time) (APIKey, error)
	// TouchKey records that a key was used at now.
	TouchKey(ctx context.Context, id string, now time.Time) error

	// Payment is one of the scope's payments (payment_not_found).
	Payment(ctx context.Context, sc Scope, id string) (PaymentIntent, error)
	// Refunds are a page of the scope's refunds, newest first.
	Refunds(ctx context.Context, sc Scope, lp ListParams) (Page[Refund], error)
	// PaymentRefunds are the refunds of one payment, newest first.
	PaymentRefunds(ctx context.Context, sc Scope, paymentID string) ([]Refund, error)
	// ObjectEvents are the newest events about one object: its own, and for
	// a payment those of its sessions, refunds and disputes.
	ObjectEvents(ctx context.Context, sc Scope, id string, limit int) ([]StoredEvent, error)
	// DailyVolume sums the scope's succeeded payments per UTC day and
	// currency since since.
	DailyVolume(ctx context.Context, sc Scope, since time.Time) ([]DayVolume, error)
}

// ErrBadCredentials is the one answer to a sign-in with an unknown email or
// a wrong password, so the form tells nobody which emails have accounts.
var ErrBadCredentials = Errorf(Unauthorized, "Incorrect email or password.")

// ErrNoSession is a missing, unknown or expired dashboard session.
var ErrNoSession = errors.New("no dashboard session")

// Password bounds: bcrypt reads at most 72 bytes, so a longer password
// would be silently cut; too short is guessable.
const (
	minPasswordLen = 10
	maxPasswordLen = 72
)

// passwordCost is bcrypt's work factor: about 50–100 ms a hash on the
// project's machines, slow enough against offline guessing.
var passwordCost = bcrypt.DefaultCost

// dummyHash is compared against when an email is unknown, so that such a
// sign-in takes as long as a wrong password (no timing oracle).
var dummyHash, _ = bcrypt.GenerateFromPassword([]byte("not a password of anyone"), passwordCost)

// CreateUser adds a dashboard user to a merchant (role admin when empty).
// Codes: validation_error (email, role, password; email taken).
func (s *Service) CreateUser(ctx context.Context, merchantID, email string, role Role, password string) (User, error) {
	email = strings.ToLower(strings.TrimSpace(email))
	if err := checkEmail("email", email); err != nil {
		return User{}, err
	}
	if role == "" {
		role = RoleAdmin
	}
	if role != RoleAdmin && role != RoleViewer {
		return User{}, Invalid("role", "must be admin or viewer")
	}
	if len(password) < minPasswordLen || len(password) > maxPasswordLen {
		return User{}, Invalid("password", "must be %d to %d bytes long", minPasswordLen, maxPasswordLen)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), passwordCost)
	if err != nil {
		return User{}, err
	}
	u := User{ID: NewID("usr_"), MerchantID: merchantID, Email: email, Role: role, Created: s.clock.Base()}
	if err := s.store.CreateUser(ctx, u, hash); err != nil {
		return User{}, err
	}
	return u, nil
}

// SignIn checks an email and password and opens a session of ttl. It
// returns the session's token (for the cookie; only its hash is stored)
// or ErrBadCredentials.
func (s *Service) SignIn(ctx context.Context, email, password string, ttl time.Duration) (string, DashboardSession, error) {
	u, hash, err := s.store.UserByEmail(ctx, strings.ToLower(strings.TrimSpace(email)))
	if errors.Is(err, ErrBadCredentials) {
		_ = bcrypt.CompareHashAndPassword(dummyHash, []byte(password))
		return "", DashboardSession{}, ErrBadCredentials
	}
	if err != nil {
		return "", DashboardSession{}, err
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil {
		return "", DashboardSession{}, ErrBadCredentials
	}
	now := s.clock.Base()
	token := randomBase62(43) // 256 bits
	ds := DashboardSession{User: u, CSRFToken: randomBase62(32), ExpiresAt: now.Add(ttl)}
	if err := s.store.CreateDashboardSession(ctx, hashToken(token), ds, now); err != nil {
		return "", DashboardSession{}, err
	}
	return token, ds, nil
}

// DashboardSession returns the live session of a cookie's token, or
// ErrNoSession.
func (s *Service) DashboardSession(ctx context.Context, token string) (DashboardSession, error) {
	if token == "" {
		return DashboardSession{}, ErrNoSession
	}
	return s.store.DashboardSession(ctx, hashToken(token), s.clock.Base())
}

// SignOut ends the session of a token.
func (s *Service) SignOut(ctx context.Context, token string) error {
	return s.store.DeleteDashboardSession(ctx, hashToken(token))
}

func hashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// Keys lists the merchant's API keys of one mode, newest first.
func (s *Service) Keys(ctx context.Context, merchantID string, live bool) ([]APIKey, error) {
	return s.store.Keys(ctx, merchantID, live)
}

// RevokeMerchantKey revokes one of the merchant's keys: the dashboard's
// revoke, which must never reach another merchant's key. Requests with it
// fail with key_revoked at once on this process. Codes: validation_error.
func (s *Service) RevokeMerchantKey(ctx context.Context, merchantID, id string) (APIKey, error) {
	k, err := s.store.RevokeMerchantKey(ctx, merchantID, id, s.clock.Base())
	s.auth.forget("", id)
	return k, err
}

// Payment returns one of the scope's payments. Codes: payment_not_found.
func (s *Service) Payment(ctx context.Context, sc Scope, id string) (PaymentIntent, error) {
	return s.store.Payment(ctx, sc, id)
}

// Payments lists the scope's payments, newest first, in either mode.
func (s *Service) Payments(ctx context.Context, sc Scope, lp ListParams) (Page[PaymentIntent], error) {
	return s.store.Payments(ctx, sc, lp)
}

// Refunds lists the scope's refunds, newest first.
func (s *Service) Refunds(ctx context.Context, sc Scope, lp ListParams) (Page[Refund], error) {
	return s.store.Refunds(ctx, sc, lp)
}

// PaymentRefunds lists the refunds of one of the scope's payments.
func (s *Service) PaymentRefunds(ctx context.Context, sc Scope, paymentID string) ([]Refund, error) {
	return s.store.PaymentRefunds(ctx, sc, paymentID)
}

// ObjectEvents returns the newest limit events about one of the scope's
// objects (for a payment, those of its refunds and disputes too).
func (s *Service) ObjectEvents(ctx context.Context, sc Scope, id string, limit int) ([]StoredEvent, error) {
	return s.store.ObjectEvents(ctx, sc, id, limit)
}

// DailyVolume returns the gross amount of succeeded payments per day and
// currency over the days up to the scope's today, oldest first, with
// zero days filled in.
func (s *Service) DailyVolume(ctx context.Context, sc Scope, days int) ([]DayVolume, error) {
	today := s.clock.Now(ctx, sc).UTC().Truncate(24 * time.Hour)
	since := today.AddDate(0, 0, -(days - 1))
	rows, err := s.store.DailyVolume(ctx, sc, since)
	if err != nil {
		return nil, err
	}
	type key struct {
		day string
		cur string
	}
	got := map[key]DayVolume{}
	currencies := []string{}
	for _, r := range rows {
		if _, seen := got[key{"", r.Currency}]; !seen {
			got[key{"", r.Currency}] = DayVolume{}
			currencies = append(currencies, r.Currency)
		}
		got[key{r.Day.UTC().Format(time.DateOnly), r.Currency}] = r
	}
	var out []DayVolume
	for _, cur := range currencies {
		for d := since; !d.After(today); d = d.AddDate(0, 0, 1) {
			v, ok := got[key{d.Format(time.DateOnly), cur}]
			if !ok {
				v = DayVolume{Currency: cur}
			}
			v.Day = d
			out = append(out, v)
		}
	}
	return out, nil
}
