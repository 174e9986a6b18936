package httpapi

import (
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
