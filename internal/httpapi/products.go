package httpapi

import (
	"github.com/gin-gonic/gin"

	"paysvc/internal/payments"
)

type priceJSON struct {
	ID          string  `json:"id"`
	Amount      int64   `json:"amount"`
	Currency    string  `json:"currency"`
	TaxBehavior *string `json:"tax_behavior"`
}

type productJSON struct {
	ID                  string            `json:"id"`
	Name                string            `json:"name"`
	Description         *string           `json:"description"`
	Active              bool              `json:"active"`
	Images              []string          `json:"images"`
	URL                 *string           `json:"url"`
	Metadata            map[string]string `json:"metadata"`
	DefaultPrice        *priceJSON        `json:"default_price"`
	Shippable           *bool             `json:"shippable"`
	UnitLabel           *string           `json:"unit_label"`
	StatementDescriptor *string           `json:"statement_descriptor"`
	TaxCode             *string           `json:"tax_code"`
	Livemode            bool              `json:"livemode"`
	Created             int64             `json:"created"`
}

func productOut(p payments.Product) productJSON {
	out := productJSON{
		ID: p.ID, Name: p.Name, Description: p.Description, Active: p.Active, Images: nonNil(p.Images),
		URL: p.URL, Metadata: metadataOut(p.Metadata), Shippable: p.Shippable, UnitLabel: p.UnitLabel,
		StatementDescriptor: p.StatementDescriptor, TaxCode: p.TaxCode, Livemode: p.Live, Created: p.Created.Unix(),
	}
	if dp := p.DefaultPrice; dp != nil {
		out.DefaultPrice = &priceJSON{ID: dp.ID, Amount: dp.Amount, Currency: dp.Currency, TaxBehavior: dp.TaxBehavior}
	}
	return out
}

// listJSON is the List shape of the spec.
type listJSON[T any] struct {
	Data    []T  `json:"data"`
	HasMore bool `json:"has_more"`
}

func listOut[S, T any](p payments.Page[S], conv func(S) T) listJSON[T] {
	out := listJSON[T]{Data: make([]T, 0, len(p.Data)), HasMore: p.HasMore}
	for _, item := range p.Data {
		out.Data = append(out.Data, conv(item))
	}
	return out
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func metadataOut(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func (s *Server) createProduct(c *gin.Context) (any, error) {
	var in payments.ProductInput
	if err := bindJSON(c, &in); err != nil {
		return nil, err
	}
	p, err := s.svc.CreateProduct(c.Request.Context(), scope(c), in)
	if err != nil {
		return nil, err
	}
	return productOut(p), nil
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
	return listOut(page, productOut), nil
}

func (s *Server) getProduct(c *gin.Context) (any, error) {
	p, err := s.svc.Product(c.Request.Context(), scope(c), c.Param("id"))
	if err != nil {
		return nil, err
	}
	return productOut(p), nil
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
	return productOut(p), nil
}

func (s *Server) deleteProduct(c *gin.Context) (any, error) {
	return s.svc.ArchiveProduct(c.Request.Context(), scope(c), c.Param("id"))
}
