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

func (s *Server) listEndpointDeliveries(c *gin.Context) (any, error) {
	lp, err := listParams(c, payments.DefaultLimit)
	if err != nil {
		return nil, err
	}
	f := payments.DeliveryFilter{ListParams: lp}
	if v, ok := c.GetQuery("status"); ok {
		if f.Status, err = payments.ParseDeliveryStatus(v); err != nil {
			return nil, err
		}
	}
	page, err := s.svc.EndpointDeliveries(c.Request.Context(), scope(c), c.Param("id"), f)
	if err != nil {
		return nil, err
	}
	return payments.ListOf(page, payments.DeliveryRecord.Object), nil
}

func (s *Server) getEndpointDelivery(c *gin.Context) (any, error) {
	return s.svc.EndpointDelivery(c.Request.Context(), scope(c), c.Param("id"), c.Param("delivery"))
}

func (s *Server) resendEvent(c *gin.Context) (any, error) {
	var in payments.ResendInput
	if err := bindJSON(c, &in); err != nil {
		return nil, err
	}
	return s.svc.ResendEvent(c.Request.Context(), scope(c), c.Param("id"), in)
}

func (s *Server) rotateEndpointSecret(c *gin.Context) (any, error) {
	var in payments.RotateInput
	if err := bindOptionalJSON(c, &in); err != nil {
		return nil, err
	}
	return s.svc.RotateEndpointSecret(c.Request.Context(), scope(c), c.Param("id"), in)
}
