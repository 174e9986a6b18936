package httpapi

import "github.com/gin-gonic/gin"

// getAccount answers GET /v1/account: the key's mode's connected account.
func (s *Server) getAccount(c *gin.Context) (any, error) {
	return s.svc.Account(c.Request.Context(), scope(c))
}
