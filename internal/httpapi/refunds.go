package httpapi

import (
	"github.com/gin-gonic/gin"

	"paysvc/internal/payments"
)

func (s *Server) createRefund(c *gin.Context) (any, error) {
	var in payments.RefundInput
	if err := bindJSON(c, &in); err != nil {
		return nil, err
	}
	// The key goes into the refund's own transaction too: the response is
	// stored only after it, and a process that dies in between must not
	// leave a retry free to refund twice.
	in.IdempotencyKey = c.GetHeader("Idempotency-Key")
	r, err := s.svc.CreateRefund(c.Request.Context(), scope(c), in)
	if err != nil {
		return nil, err
	}
	return r.Object(), nil
}

func (s *Server) getRefund(c *gin.Context) (any, error) {
	r, err := s.svc.Refund(c.Request.Context(), scope(c), c.Param("id"))
	if err != nil {
		return nil, err
	}
	return r.Object(), nil
}

func (s *Server) getBalance(c *gin.Context) (any, error) {
	sc := scope(c)
	bs, err := s.svc.Balances(c.Request.Context(), sc)
	if err != nil {
		return nil, err
	}
	return payments.BalanceObjectOf(sc, bs), nil
}

func (s *Server) listDisputes(c *gin.Context) (any, error) {
	lp, err := listParams(c, payments.DisputeListLimit)
	if err != nil {
		return nil, err
	}
	page, err := s.svc.Disputes(c.Request.Context(), scope(c), lp)
	if err != nil {
		return nil, err
	}
	return payments.ListOf(page, payments.Dispute.Object), nil
}

func (s *Server) getDispute(c *gin.Context) (any, error) {
	d, err := s.svc.Dispute(c.Request.Context(), scope(c), c.Param("id"))
	if err != nil {
		return nil, err
	}
	return d.Object(), nil
}

func (s *Server) updateEvidence(c *gin.Context) (any, error) {
	var in payments.EvidenceInput
	if err := bindJSON(c, &in); err != nil {
		return nil, err
	}
	d, err := s.svc.UpdateEvidence(c.Request.Context(), scope(c), c.Param("id"), in)
	if err != nil {
		return nil, err
	}
	return d.Object(), nil
}
