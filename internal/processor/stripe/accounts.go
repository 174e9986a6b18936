package stripe

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"paysvc/internal/processor"
)

var accountID = regexp.MustCompile(`^acct_[A-Za-z0-9]{1,64}$`)

// ErrBadAccountID is an account id that is not a Stripe account id (acct_…).
var ErrBadAccountID = errors.New("a Stripe connected account id looks like acct_1A2b3C… (letters and digits)")

// ErrAccountTaken is a connected account already recorded for another
// merchant in the same mode: one Stripe account serves one merchant, or
// Stripe's events could not say whose they are.
var ErrAccountTaken = errors.New("this connected account is already recorded for another merchant in this mode")

// SetConnectedAccount records accountID as the merchant's Stripe connected
// account in acct's mode (`api merchant stripe-account`), replacing any
// earlier one. Every call for that merchant and mode then carries it as
// Stripe-Account, and Stripe events naming it are that merchant's.
// Errors: ErrBadAccountID, ErrAccountTaken, or the database's.
func SetConnectedAccount(ctx context.Context, db *sqlx.DB, acct processor.Account, id string) error {
	if !accountID.MatchString(id) {
		return ErrBadAccountID
	}
	const q = `INSERT INTO stripe_accounts (merchant_id, livemode, account_id) VALUES ($1, $2, $3)
	ON CONFLICT (merchant_id, livemode) DO UPDATE SET account_id = EXCLUDED.account_id, created_at = now()`
	_, err := db.ExecContext(ctx, q, acct.MerchantID, acct.Live, id)
	if isUnique(err) {
		return ErrAccountTaken
	}
	if err != nil {
		return fmt.Errorf("record connected account: %w", err)
	}
	return nil
}

// connectedAccount is the merchant's connected account in acct's mode; a
// merchant without one cannot use Stripe (a permanent processor error: an
// operator must run `api merchant stripe-account` first).
func (p *Processor) connectedAccount(ctx context.Context, op string, acct processor.Account) (string, error) {
	const q = `SELECT account_id FROM stripe_accounts WHERE merchant_id = $1 AND livemode = $2`
	var id string
	err := p.db.GetContext(ctx, &id, q, acct.MerchantID, acct.Live)
	if errors.Is(err, sql.ErrNoRows) {
		return "", &processor.Error{Op: op, Code: "no_connected_account",
			Err: fmt.Errorf("merchant %s has no Stripe connected account for livemode=%v (api merchant stripe-account)", acct.MerchantID, acct.Live)}
	}
	if err != nil {
		return "", &processor.Error{Op: op, Retryable: true, Code: "database_unavailable", Err: err}
	}
	return id, nil
}

// merchantOf is the merchant whose connected account id is, in a mode.
func merchantOf(ctx context.Context, db *sqlx.DB, id string, live bool) (processor.Account, bool, error) {
	const q = `SELECT merchant_id FROM stripe_accounts WHERE account_id = $1 AND livemode = $2`
	var m string
	err := db.GetContext(ctx, &m, q, id, live)
	if errors.Is(err, sql.ErrNoRows) {
		return processor.Account{}, false, nil
	}
	if err != nil {
		return processor.Account{}, false, fmt.Errorf("find merchant of %s: %w", id, err)
	}
	return processor.Account{MerchantID: m, Live: live}, true, nil
}

func isUnique(err error) bool {
	var pqErr *pq.Error
	return errors.As(err, &pqErr) && pqErr.Code == "23505"
}
