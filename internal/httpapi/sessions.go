package httpapi

import (
	"github.com/gin-gonic/gin"

	"paysvc/internal/payments"
)

func (s *Server) createSession(c *gin.Context) (any, error) {
	var in payments.SessionInput
	if err := bindJSON(c, &in); err != nil {
		return nil, err
	}
	cs, err := s.svc.CreateSession(c.Request.Context(), scope(c), in)
	if err != nil {
		return nil, err
	}
	return cs.Object(), nil
}

func (s *Server) getSession(c *gin.Context) (any, error) {
	cs, err := s.svc.Session(c.Request.Context(), scope(c), c.Param("id"))
	if err != nil {
		return nil, err
	}
	return cs.Object(), nil
}

func (s *Server) createIntent(c *gin.Context) (any, error) {
	var in payments.IntentInput
	if err := bindJSON(c, &in); err != nil {
		return nil, err
	}
	return s.svc.CreateIntent(c.Request.Context(), scope(c), in)
}

func (s *Server) listTestPayments(c *gin.Context) (any, error) {
	lp, err := listParams(c, payments.DefaultLimit)
	if err != nil {
		return nil, err
	}
	page, err := s.svc.TestPayments(c.Request.Context(), scope(c), lp)
	if err != nil {
		return nil, err
	}
	return payments.ListOf(page, payments.PaymentIntent.Object), nil
}
