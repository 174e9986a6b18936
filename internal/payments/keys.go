package payments

import (
	"context"
	"crypto/sha256"
	"strings"
	"time"
)

// Plan is a merchant's pricing plan; it sets the transaction fee.
type Plan string

// The plans of the spec.
const (
	PlanFree  Plan = "free"
	PlanBrand Plan = "brand"
	PlanPro   Plan = "pro"
)

// Merchant is an account that sells through the API.
type Merchant struct {
	ID            string     `json:"id"`
	Name          string     `json:"name"`
	Email         *string    `json:"email"`
	Plan          Plan       `json:"plan"`
	SuspendedAt   *time.Time `json:"-"`
	UnsuspendedAt *time.Time `json:"-"`
	Created       time.Time  `json:"-"`
}

// APIKey is a key's record; the secret itself is never stored, only its hash.
type APIKey struct {
	ID         string
	MerchantID string
	Live       bool
	Hint       string // the first characters, to tell keys apart
	ExpiresAt  *time.Time
	RevokedAt  *time.Time
	Created    time.Time
	// LastUsedAt is when a request last authenticated with the key, to
	// the minute (see touchInterval).
	LastUsedAt *time.Time
}

// KeyAuth is what authentication reads for a key hash.
type KeyAuth struct {
	Key                 APIKey
	MerchantSuspendedAt *time.Time
	// ClockOffset is how far the key's scope's sandbox clock is ahead of
	// real time, read with the key so that the request's Clock reads need
	// no query of their own.
	ClockOffset time.Duration
}

// KeyCounts are what the key-creation limits are checked against, counted
// inside the transaction that inserts the key.
type KeyCounts struct {
	Last10Min int
	LastHour  int
	Active    int
}

// Key-creation limits of the spec.
const (
	maxKeysPer10Min = 3
	maxKeysPerHour  = 10
	maxActiveKeys   = 25
)

// CheckKeyLimits returns key_creation_rate_exceeded or max_keys_reached when
// one more key would break a limit.
func CheckKeyLimits(c KeyCounts) error {
	switch {
	case c.Active >= maxActiveKeys:
		return Errorf(MaxKeysReached, "A merchant can have at most %d active API keys; revoke one first.", maxActiveKeys)
	case c.Last10Min >= maxKeysPer10Min:
		return Errorf(KeyCreationRateExceeded, "At most %d API keys can be created per 10 minutes.", maxKeysPer10Min)
	case c.LastHour >= maxKeysPerHour:
		return Errorf(KeyCreationRateExceeded, "At most %d API keys can be created per hour.", maxKeysPerHour)
	}
	return nil
}

const (
	testKeyPrefix = "svc_test_"
	liveKeyPrefix = "svc_live_"
	keySecretLen  = 32
)

// HashKey returns the stored form of an API key.
func HashKey(raw string) []byte {
	h := sha256.Sum256([]byte(raw))
	return h[:]
}

// NewKey is a freshly created key: the only time Secret exists outside the caller.
type NewKey struct {
	APIKey
	Secret string
}

// CreateKey makes a key for the merchant in the given mode. It returns
// key_creation_rate_exceeded or max_keys_reached when a limit forbids it.
func (s *Service) CreateKey(ctx context.Context, merchantID string, live bool, expiresIn time.Duration) (NewKey, error) {
	if expiresIn < 0 {
		return NewKey{}, Invalid("expires_in", "must be positive")
	}
	prefix := testKeyPrefix
	if live {
		prefix = liveKeyPrefix
	}
	secret := prefix + randomBase62(keySecretLen)
	now := s.clock.Base()
	k := APIKey{
		ID:         NewID("key_"),
		MerchantID: merchantID,
		Live:       live,
		Hint:       secret[:len(prefix)+4],
		Created:    now,
	}
	if expiresIn > 0 {
		t := now.Add(expiresIn)
		k.ExpiresAt = &t
	}
	if err := s.store.CreateKey(ctx, k, HashKey(secret), CheckKeyLimits); err != nil {
		return NewKey{}, err
	}
	return NewKey{APIKey: k, Secret: secret}, nil
}

// RevokeKey revokes a key; requests with it then fail with key_revoked.
func (s *Service) RevokeKey(ctx context.Context, id string) (APIKey, error) {
	k, err := s.store.RevokeKey(ctx, id, s.clock.Base())
	s.auth.forget("", id)
	return k, err
}

// Authenticate turns a raw API key into the scope it acts for. It returns
// unauthorized, key_revoked (also for a suspended merchant) or key_expired.
//
// A key the auth cache does not answer for is read from the database.
// Unless the cache has seen it found before (a key in use), reads, when
// not nil, is asked first and told of a read that found no key or was
// abandoned (KeyReads). A string that cannot be a key is refused without
// a read.
func (s *Service) Authenticate(ctx context.Context, raw string, reads KeyReads) (Scope, APIKey, error) {
	if !wellFormedKey(raw) {
		return Scope{}, APIKey{}, errUnauthorized
	}
	hash := HashKey(raw)
	a, ok := s.auth.get(hash, s.clock.Base())
	if !ok {
		if s.auth.isUnknown(hash, s.clock.Base()) {
			return Scope{}, APIKey{}, errUnauthorized
		}
		if reads != nil && s.auth.known(hash) {
			reads = nil // a key in use: read it, whatever its client did
		}
		if reads != nil {
			if err := reads.Admit(); err != nil {
				return Scope{}, APIKey{}, err
			}
		}
		var err error
		if a, err = s.store.KeyByHash(ctx, hash); err != nil {
			missed := ErrorCode(err) == Unauthorized
			if missed {
				s.auth.putUnknown(hash, s.clock.Base())
			}
			// A read its client abandoned counts too: dropping each
			// request mid-read must not be a way around the budget.
			if reads != nil && (missed || ctx.Err() != nil) {
				reads.Missed(ctx)
			}
			return Scope{}, APIKey{}, err
		}
		s.auth.put(hash, a, s.clock.Base())
		// The request's clock reads need no query of their own.
		s.clock.remember(Scope{MerchantID: a.Key.MerchantID, Live: a.Key.Live}, a.ClockOffset)
		s.touchKey(ctx, a.Key)
	}
	switch {
	case a.Key.RevokedAt != nil:
		return Scope{}, APIKey{}, Errorf(KeyRevoked, "This API key has been revoked.")
	case a.MerchantSuspendedAt != nil:
		return Scope{}, APIKey{}, Errorf(KeyRevoked, "This merchant's API keys are suspended; contact support.")
	case a.Key.ExpiresAt != nil && !s.clock.Base().Before(*a.Key.ExpiresAt):
		return Scope{}, APIKey{}, Errorf(KeyExpired, "This API key has expired.")
	}
	return Scope{MerchantID: a.Key.MerchantID, Live: a.Key.Live}, a.Key, nil
}

// KeyReads admits the database reads of one client's keys. A key is read
// when no cache knows it, so every made-up key is a read; the API counts
// the reads that found nothing per client address and refuses a client
// past its budget (ratelimit.Strikes). Keys the cache has seen found are
// read without asking, so they work meanwhile.
type KeyReads interface {
	// Admit is asked before a key is read; its error is the answer.
	Admit() error
	// Missed is told that the read found no key, or that its context
	// ended first (ctx may be done).
	Missed(ctx context.Context)
}

// wellFormedKey says whether raw has the shape of every key CreateKey
// makes: a mode's prefix and keySecretLen base62 characters.
func wellFormedKey(raw string) bool {
	secret, ok := strings.CutPrefix(raw, testKeyPrefix)
	if !ok {
		if secret, ok = strings.CutPrefix(raw, liveKeyPrefix); !ok {
			return false
		}
	}
	if len(secret) != keySecretLen {
		return false
	}
	for i := 0; i < len(secret); i++ {
		switch c := secret[i]; {
		case '0' <= c && c <= '9', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		default:
			return false
		}
	}
	return true
}

// touchInterval is how stale a key's last use may be shown: a key is
// written at most once per interval (and only on an auth-cache miss), so
// authentication stays a read on the hot path.
const touchInterval = time.Minute

// touchKey records the key's use in the background when its stored last
// use is older than touchInterval. It is informational: a failure is
// dropped, and the request never waits for it.
func (s *Service) touchKey(ctx context.Context, k APIKey) {
	now := s.clock.Base()
	if k.LastUsedAt != nil && now.Sub(*k.LastUsedAt) < touchInterval {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.store.TouchKey(ctx, k.ID, now)
	}()
}

// errUnauthorized is the one answer for a missing, malformed or unknown key,
// so a caller learns nothing about which keys exist.
var errUnauthorized = Errorf(Unauthorized, "Invalid API key provided.")

// ErrUnauthorized returns the unauthorized error for a missing or unknown key.
func ErrUnauthorized() error { return errUnauthorized }

// CreateMerchant creates a merchant on a plan (free when empty).
func (s *Service) CreateMerchant(ctx context.Context, name, email string, plan Plan) (Merchant, error) {
	if strings.TrimSpace(name) == "" {
		return Merchant{}, Invalid("name", "is required")
	}
	if plan == "" {
		plan = PlanFree
	}
	if plan != PlanFree && plan != PlanBrand && plan != PlanPro {
		return Merchant{}, Invalid("plan", "must be one of free, brand, pro")
	}
	m := Merchant{ID: NewID("mch_"), Name: name, Plan: plan, Created: s.clock.Base()}
	if email != "" {
		if err := checkEmail("email", email); err != nil {
			return Merchant{}, err
		}
		m.Email = &email
	}
	if err := s.store.CreateMerchant(ctx, m); err != nil {
		return Merchant{}, err
	}
	return m, nil
}

// UnsuspendMerchant lifts a suspension; violations before now stop counting.
func (s *Service) UnsuspendMerchant(ctx context.Context, id string) (Merchant, error) {
	m, err := s.store.UnsuspendMerchant(ctx, id, s.clock.Base())
	s.auth.forget(id, "")
	return m, err
}
