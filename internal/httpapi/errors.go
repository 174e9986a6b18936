package httpapi

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"paysvc/internal/payments"
	"paysvc/internal/processor"
)

// statusOf is the one place that maps error codes to HTTP statuses.
var statusOf = map[payments.Code]int{
	payments.Unauthorized:              http.StatusUnauthorized,
	payments.KeyRevoked:                http.StatusUnauthorized,
	payments.KeyExpired:                http.StatusUnauthorized,
	payments.RateLimitExceeded:         http.StatusTooManyRequests,
	payments.ValidationError:           http.StatusBadRequest,
	payments.InvalidURL:                http.StatusBadRequest,
	payments.InvalidInterval:           http.StatusBadRequest,
	payments.ProductNotFound:           http.StatusNotFound,
	payments.CustomerNotFound:          http.StatusNotFound,
	payments.SessionNotFound:           http.StatusNotFound,
	payments.PaymentNotFound:           http.StatusNotFound,
	payments.SubscriptionNotFound:      http.StatusNotFound,
	payments.RefundNotAllowed:          http.StatusBadRequest,
	payments.AlreadyRefunded:           http.StatusBadRequest,
	payments.RefundAmountTooLarge:      http.StatusBadRequest,
	payments.InsufficientBalance:       http.StatusBadRequest,
	payments.BalanceVerificationFailed: http.StatusBadRequest,
	payments.EndpointNotFound:          http.StatusNotFound,
	payments.ProcessorError:            http.StatusBadGateway,
	payments.InternalError:             http.StatusInternalServerError,
	payments.PayloadTooLarge:           http.StatusRequestEntityTooLarge,
	payments.ProhibitedContent:         http.StatusBadRequest,
	payments.WebhookURLMustBeHTTPS:     http.StatusBadRequest,
	payments.KeyCreationRateExceeded:   http.StatusTooManyRequests,
	payments.MaxKeysReached:            http.StatusBadRequest,
}

// StatusOf is the HTTP status of a code, for the other HTTP surfaces (the
// dashboard's pages) to answer as the API does; 400 for a code outside the
// table.
func StatusOf(c payments.Code) int {
	if st, ok := statusOf[c]; ok {
		return st
	}
	return http.StatusBadRequest
}

const internalMessage = "An unexpected error occurred. Quote the request_id when contacting support."

type errorBody struct {
	Code    payments.Code `json:"code"`
	Message string        `json:"message"`
}

type errorEnvelope struct {
	Success   bool      `json:"success"`
	Error     errorBody `json:"error"`
	RequestID string    `json:"request_id"`
}

type successEnvelope struct {
	Success   bool   `json:"success"`
	Data      any    `json:"data"`
	RequestID string `json:"request_id"`
}

// writeError answers err in the error envelope. A *payments.Error keeps its
// code and message; anything else is a 500 whose cause is logged, not sent.
func (s *Server) writeError(c *gin.Context, err error) {
	var pe *payments.Error
	status, code, msg := http.StatusInternalServerError, payments.InternalError, internalMessage
	var proc *processor.Error
	switch {
	case errors.As(err, &pe):
		if st, ok := statusOf[pe.Code]; ok {
			status, code, msg = st, pe.Code, pe.Msg
		}
	case errors.As(err, &proc):
		status, code, msg = http.StatusBadGateway, payments.ProcessorError, "The payment processor could not complete the request; nothing was charged. Retry later."
	}
	if status >= 500 { // the cause is logged, never sent
		s.log.ErrorContext(c.Request.Context(), "request failed",
			"request_id", requestID(c), "method", c.Request.Method, "route", c.FullPath(), "error", err)
	}
	writeJSON(c, status, errorEnvelope{Error: errorBody{Code: code, Message: msg}, RequestID: requestID(c)})
	c.Abort()
}

// abortWith answers a code with its message and stops the chain.
func (s *Server) abortWith(c *gin.Context, code payments.Code, msg string) {
	s.writeError(c, &payments.Error{Code: code, Msg: msg})
}

// logAttrs are the attributes every request log line carries; never a key or secret.
func logAttrs(c *gin.Context) []any {
	r := requestOf(c)
	attrs := []any{"request_id", r.id}
	if r.authd {
		attrs = append(attrs, "merchant_id", r.scope.MerchantID, "livemode", r.scope.Live)
	}
	return attrs
}
