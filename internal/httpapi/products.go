package httpapi

import (
	"github.com/gin-gonic/gin"

	"paysvc/internal/payments"
)

func (s *Server) createProduct(c *gin.Context) (any, error) {
	var in payments.ProductInput
	if err := bindJSON(c, &in); err != nil {
		return nil, err
	}
	p, err := s.svc.CreateProduct(c.Request.Context(), scope(c), in)
	if err != nil {
		return nil, err
	}
	return p.Object(), nil
}

func (s *Server) listProducts(c *gin.Context) (any, error) {
	lp, err := listParams(c, payments.DefaultLimit)
	if err != nil {
		return nil, err
	}
	page, err := s.svc.Products(c.Request.Context(), scope(c), lp)
	if err != nil {
		return nil, err
	}
	return payments.ListOf(page, payments.Product.Object), nil
}

func (s *Server) getProduct(c *gin.Context) (any, error) {
	p, err := s.svc.Product(c.Request.Context(), scope(c), c.Param("id"))
	if err != nil {
		return nil, err
	}
	return p.Object(), nil
}

func (s *Server) updateProduct(c *gin.Context) (any, error) {
	var in payments.ProductInput
	if err := bindJSON(c, &in); err != nil {
		return nil, err
	}
	p, err := s.svc.UpdateProduct(c.Request.Context(), scope(c), c.Param("id"), in)
	if err != nil {
		return nil, err
	}
	return p.Object(), nil
}

func (s *Server) deleteProduct(c *gin.Context) (any, error) {
	return s.svc.ArchiveProduct(c.Request.Context(), scope(c), c.Param("id"))
}
