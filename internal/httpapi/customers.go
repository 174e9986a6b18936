package httpapi

import (
	"github.com/gin-gonic/gin"

	"paysvc/internal/payments"
)

func (s *Server) createCustomer(c *gin.Context) (any, error) {
	var in payments.CustomerInput
	if err := bindJSON(c, &in); err != nil {
		return nil, err
	}
	cu, err := s.svc.CreateCustomer(c.Request.Context(), scope(c), in)
	if err != nil {
		return nil, err
	}
	return cu.Object(), nil
}

func (s *Server) listCustomers(c *gin.Context) (any, error) {
	lp, err := listParams(c, payments.DefaultLimit)
	if err != nil {
		return nil, err
	}
	page, err := s.svc.Customers(c.Request.Context(), scope(c), lp)
	if err != nil {
		return nil, err
	}
	return payments.ListOf(page, payments.Customer.Object), nil
}

func (s *Server) getCustomer(c *gin.Context) (any, error) {
	cu, err := s.svc.Customer(c.Request.Context(), scope(c), c.Param("id"))
	if err != nil {
		return nil, err
	}
	return cu.Object(), nil
}

func (s *Server) updateCustomer(c *gin.Context) (any, error) {
	var in payments.CustomerInput
	if err := bindJSON(c, &in); err != nil {
		return nil, err
	}
	cu, err := s.svc.UpdateCustomer(c.Request.Context(), scope(c), c.Param("id"), in)
	if err != nil {
		return nil, err
	}
	return cu.Object(), nil
}

func (s *Server) deleteCustomer(c *gin.Context) (any, error) {
	return s.svc.DeleteCustomer(c.Request.Context(), scope(c), c.Param("id"))
}
