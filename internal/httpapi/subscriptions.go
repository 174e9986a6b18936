package httpapi

import (
	"strings"

	"github.com/gin-gonic/gin"

	"paysvc/internal/payments"
)

func (s *Server) createSubscriptionProduct(c *gin.Context) (any, error) {
	var in payments.SubscriptionProductInput
	if err := bindJSON(c, &in); err != nil {
		return nil, err
	}
	p, err := s.svc.CreateSubscriptionProduct(c.Request.Context(), scope(c), in)
	if err != nil {
		return nil, err
	}
	return p.Object(), nil
}

func (s *Server) listSubscriptionProducts(c *gin.Context) (any, error) {
	lp, err := listParams(c, payments.DefaultLimit)
	if err != nil {
		return nil, err
	}
	page, err := s.svc.SubscriptionProducts(c.Request.Context(), scope(c), lp)
	if err != nil {
		return nil, err
	}
	return payments.ListOf(page, payments.SubscriptionProduct.Object), nil
}

// bindOptionalJSON is bindJSON for a body that may be left out entirely
// (cancel and resume take no required field, and Stripe clients POST them
// without a body); a body that is sent must be a valid object.
func bindOptionalJSON(c *gin.Context, v any) error {
	body, err := readBody(c)
	if err != nil {
		return err
	}
	if strings.TrimSpace(string(body)) == "" {
		return nil
	}
	return decodeJSON(body, v)
}

func (s *Server) listSubscriptions(c *gin.Context) (any, error) {
	lp, err := listParams(c, payments.DefaultLimit)
	if err != nil {
		return nil, err
	}
	q := payments.SubscriptionQuery{ListParams: lp}
	_, q.LimitGiven = c.GetQuery("limit")
	for name, dst := range map[string]**string{"status": &q.Status, "customer": &q.Customer, "page": &q.Page, "starting_after": &q.StartingAfter} {
		if v, ok := c.GetQuery(name); ok {
			*dst = &v
		}
	}
	f, err := payments.ParseSubscriptionQuery(q)
	if err != nil {
		return nil, err
	}
	return s.svc.Subscriptions(c.Request.Context(), scope(c), f)
}

func (s *Server) getSubscription(c *gin.Context) (any, error) {
	sub, err := s.svc.Subscription(c.Request.Context(), scope(c), c.Param("id"))
	if err != nil {
		return nil, err
	}
	return sub.Object(), nil
}

func (s *Server) cancelSubscription(c *gin.Context) (any, error) {
	var in payments.CancelInput
	if err := bindOptionalJSON(c, &in); err != nil {
		return nil, err
	}
	sub, err := s.svc.CancelSubscription(c.Request.Context(), scope(c), c.Param("id"), in)
	if err != nil {
		return nil, err
	}
	return sub.Object(), nil
}

func (s *Server) resumeSubscription(c *gin.Context) (any, error) {
	var in struct{}
	if err := bindOptionalJSON(c, &in); err != nil {
		return nil, err
	}
	sub, err := s.svc.ResumeSubscription(c.Request.Context(), scope(c), c.Param("id"))
	if err != nil {
		return nil, err
	}
	return sub.Object(), nil
}

func (s *Server) createSubscriptionSession(c *gin.Context) (any, error) {
	var in payments.SubscriptionSessionInput
	if err := bindJSON(c, &in); err != nil {
		return nil, err
	}
	cs, err := s.svc.CreateSubscriptionSession(c.Request.Context(), scope(c), in)
	if err != nil {
		return nil, err
	}
	return cs.Object(), nil
}

// changeQuantity is PATCH /v1/subscriptions/{id}/quantity.
func (s *Server) changeQuantity(c *gin.Context) (any, error) {
	var in payments.QuantityInput
	if err := bindJSON(c, &in); err != nil {
		return nil, err
	}
	sub, err := s.svc.ChangeQuantity(c.Request.Context(), scope(c), c.Param("id"), in)
	if err != nil {
		return nil, err
	}
	return sub.Object(), nil
}

// previewQuantity is POST /v1/subscriptions/{id}/quantity/preview.
func (s *Server) previewQuantity(c *gin.Context) (any, error) {
	var in payments.QuantityInput
	if err := bindJSON(c, &in); err != nil {
		return nil, err
	}
	p, err := s.svc.PreviewQuantity(c.Request.Context(), scope(c), c.Param("id"), in)
	if err != nil {
		return nil, err
	}
	return p.Object(), nil
}

func (s *Server) createPortalSession(c *gin.Context) (any, error) {
	var in payments.PortalSessionInput
	if err := bindJSON(c, &in); err != nil {
		return nil, err
	}
	return s.svc.CreatePortalSession(c.Request.Context(), scope(c), c.Param("id"), in)
}
