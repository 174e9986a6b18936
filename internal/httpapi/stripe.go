package httpapi

import "github.com/gin-gonic/gin"

// stripeWebhook answers POST /stripe/webhook: Stripe's events, verified by
// their Stripe-Signature and stored for the worker, answered at once (2xx
// within Stripe's timeout, or Stripe redelivers). The exact bytes are
// verified, so the body is read raw, never re-encoded. A bad signature, or
// a signed event whose object does not decode, is 400; a failure to store
// is 500, and Stripe sends the event again.
func (s *Server) stripeWebhook(c *gin.Context) (any, error) {
	body, err := readBody(c)
	if err != nil {
		return nil, err
	}
	kept, err := s.stripe.Receive(c.Request.Context(), body, c.GetHeader("Stripe-Signature"))
	if err != nil {
		return nil, err
	}
	return gin.H{"received": true, "kept": kept}, nil
}
