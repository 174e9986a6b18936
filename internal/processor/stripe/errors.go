package stripe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	stripego "github.com/stripe/stripe-go/v76"

	"paysvc/internal/processor"
)

// asError turns a failed Stripe call into a *processor.Error. Stripe's own
// message is dropped: a card error's message can quote what the customer
// typed. What is kept is what support needs (the HTTP status, Stripe's type,
// code and decline code, and the request id to find the call in Stripe's
// dashboard) and whether a retry may succeed: network failures, timeouts,
// 5xx, 429 and lock_timeout are retryable; everything else is permanent
// (a declined card, an invalid request, an authentication failure).
func asError(op string, err error) *processor.Error {
	var se *stripego.Error
	if !errors.As(err, &se) {
		// No answer from Stripe: connection refused, reset, timeout.
		code := "network_error"
		var ne net.Error
		if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
			code = "timeout"
		}
		return &processor.Error{Op: op, Retryable: true, Code: code, Err: safeNetError(err)}
	}
	code := string(se.Code)
	if code == "" {
		code = string(se.Type)
	}
	if code == "" {
		code = fmt.Sprintf("http_%d", se.HTTPStatusCode)
	}
	retryable := se.HTTPStatusCode >= 500 || se.HTTPStatusCode == http.StatusTooManyRequests ||
		se.Code == stripego.ErrorCodeLockTimeout || se.Code == stripego.ErrorCodeRateLimit
	return &processor.Error{Op: op, Retryable: retryable, Code: code, DeclineCode: string(se.DeclineCode),
		RequestID: se.RequestID, Err: fmt.Errorf("stripe answered %d %s/%s (request %s)", se.HTTPStatusCode, se.Type, se.Code, se.RequestID)}
}

// safeNetError keeps a transport error's kind, not its text verbatim
// (which names the URL, and could name query parameters).
func safeNetError(err error) error {
	var ue interface{ Timeout() bool }
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return errors.New("no answer from Stripe before the deadline")
	case errors.As(err, &ue) && ue.Timeout():
		return errors.New("no answer from Stripe before STRIPE_TIMEOUT")
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return fmt.Errorf("cannot reach Stripe: %s: %v", oe.Op, oe.Err)
	}
	return errors.New("cannot reach Stripe")
}
