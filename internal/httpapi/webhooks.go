package httpapi

import (
	"github.com/gin-gonic/gin"

	"paysvc/internal/payments"
)

func (s *Server) createEndpoint(c *gin.Context) (any, error) {
	var in payments.EndpointInput
	if err := bindJSON(c, &in); err != nil {
		return nil, err
	}
	return s.svc.CreateEndpoint(c.Request.Context(), scope(c), in)
}

func (s *Server) listEndpoints(c *gin.Context) (any, error) {
	return s.svc.Endpoints(c.Request.Context(), scope(c))
}

func (s *Server) deleteEndpoint(c *gin.Context) (any, error) {
	return s.svc.DeleteEndpoint(c.Request.Context(), scope(c), c.Param("id"))
}

func (s *Server) getEndpoint(c *gin.Context) (any, error) {
	return s.svc.Endpoint(c.Request.Context(), scope(c), c.Param("id"))
}

func (s *Server) updateEndpoint(c *gin.Context) (any, error) {
	var in payments.EndpointUpdate
	if err := bindJSON(c, &in); err != nil {
		return nil, err
	}
	return s.svc.UpdateEndpoint(c.Request.Context(), scope(c), c.Param("id"), in)
}
