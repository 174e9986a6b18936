package httpapi

import (
	"strconv"

	"github.com/gin-gonic/gin"

	"paysvc/internal/payments"
)

// maxUnix bounds created[gte] and created[lte]: 9999-12-31T23:59:59Z.
const maxUnix = 253402300799

func (s *Server) listEvents(c *gin.Context) (any, error) {
	lp, err := listParams(c, payments.DefaultLimit)
	if err != nil {
		return nil, err
	}
	f := payments.EventFilter{ListParams: lp}
	if v, ok := c.GetQuery("type"); ok {
		if f.Types, err = payments.ParseEventType(v); err != nil {
			return nil, err
		}
	}
	for name, dst := range map[string]**int64{"created[gte]": &f.CreatedGTE, "created[lte]": &f.CreatedLTE} {
		v, ok := c.GetQuery(name)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n > maxUnix {
			return nil, payments.Invalid(name, "must be a Unix timestamp in seconds (an integer from 0 to %d)", maxUnix)
		}
		*dst = &n
	}
	page, err := s.svc.Events(c.Request.Context(), scope(c), f)
	if err != nil {
		return nil, err
	}
	return payments.ListOf(page, payments.StoredEvent.Object), nil
}

func (s *Server) getEvent(c *gin.Context) (any, error) {
	e, err := s.svc.Event(c.Request.Context(), scope(c), c.Param("id"))
	if err != nil {
		return nil, err
	}
	return e.Object(), nil
}
