package payments

import (
	"context"
	"time"
)

// Product is a catalogue item; deleting it archives it (Active false).
type Product struct {
	ID                  string
	Name                string
	Description         *string
	Active              bool
	Images              []string
	URL                 *string
	Metadata            map[string]string
	DefaultPrice        *Price
	Shippable           *bool
	UnitLabel           *string
	StatementDescriptor *string
	TaxCode             *string
	Live                bool
	Created             time.Time
}

// Price is an amount a product sells for.
type Price struct {
	ID          string
	ProductID   string
	Amount      int64
	Currency    string
	TaxBehavior *string
	Created     time.Time
}

// PriceObject is a price as the API returns it (a product's default_price).
type PriceObject struct {
	ID          string  `json:"id"`
	Amount      int64   `json:"amount"`
	Currency    string  `json:"currency"`
	TaxBehavior *string `json:"tax_behavior"`
}

// ProductObject is a product as the API returns it.
type ProductObject struct {
	ID                  string            `json:"id"`
	Name                string            `json:"name"`
	Description         *string           `json:"description"`
	Active              bool              `json:"active"`
	Images              []string          `json:"images"`
	URL                 *string           `json:"url"`
	Metadata            map[string]string `json:"metadata"`
	DefaultPrice        *PriceObject      `json:"default_price"`
	Shippable           *bool             `json:"shippable"`
	UnitLabel           *string           `json:"unit_label"`
	StatementDescriptor *string           `json:"statement_descriptor"`
	TaxCode             *string           `json:"tax_code"`
	Livemode            bool              `json:"livemode"`
	Created             int64             `json:"created"`
}

// Object returns the product's API shape.
func (p Product) Object() ProductObject {
	o := ProductObject{
		ID: p.ID, Name: p.Name, Description: p.Description, Active: p.Active, Images: p.Images,
		URL: p.URL, Metadata: nonNilMap(p.Metadata), Shippable: p.Shippable, UnitLabel: p.UnitLabel,
		StatementDescriptor: p.StatementDescriptor, TaxCode: p.TaxCode, Livemode: p.Live, Created: p.Created.Unix(),
	}
	if o.Images == nil {
		o.Images = []string{}
	}
	if dp := p.DefaultPrice; dp != nil {
		o.DefaultPrice = &PriceObject{ID: dp.ID, Amount: dp.Amount, Currency: dp.Currency, TaxBehavior: dp.TaxBehavior}
	}
	return o
}

// PriceInput is the price of a product create or update.
type PriceInput struct {
	Amount      *int64  `json:"amount"`
	Currency    *string `json:"currency"`
	TaxBehavior *string `json:"tax_behavior"`
}

// ProductInput is the body of a product create or update; nil means not given.
type ProductInput struct {
	Name                *string       `json:"name"`
	Description         *string       `json:"description"`
	Images              *[]string     `json:"images"`
	Metadata            MetadataInput `json:"metadata"`
	Active              *bool         `json:"active"`
	URL                 *string       `json:"url"`
	Shippable           *bool         `json:"shippable"`
	UnitLabel           *string       `json:"unit_label"`
	StatementDescriptor *string       `json:"statement_descriptor"`
	TaxCode             *string       `json:"tax_code"`
	Price               *PriceInput   `json:"price"`
}

func (in *ProductInput) validate(create bool) error {
	if err := checkText("name", in.Name, create); err != nil {
		return err
	}
	if in.Name != nil && *in.Name == "" {
		return Invalid("name", "must be at least 1 character")
	}
	for field, v := range map[string]*string{"description": in.Description, "unit_label": in.UnitLabel, "tax_code": in.TaxCode} {
		if err := checkText(field, v, false); err != nil {
			return err
		}
	}
	if in.Images != nil {
		if len(*in.Images) > maxProductImages {
			return Invalid("images", "can have at most %d items", maxProductImages)
		}
		for _, img := range *in.Images {
			if err := checkHTTPS("images", img); err != nil {
				return err
			}
		}
	}
	// An empty url on update clears it, as in Stripe's API.
	if in.URL != nil && (create || *in.URL != "") {
		if err := checkHTTPS("url", *in.URL); err != nil {
			return err
		}
	}
	if d := in.StatementDescriptor; d != nil {
		if err := checkText("statement_descriptor", d, false); err != nil {
			return err
		}
		if len([]rune(*d)) > maxStatementDescriptor {
			return Invalid("statement_descriptor", "must be at most %d characters", maxStatementDescriptor)
		}
	}
	if err := checkMetadata(in.Metadata); err != nil {
		return err
	}
	if p := in.Price; p != nil {
		if err := checkAmount("price.amount", p.Amount); err != nil {
			return err
		}
		if _, err := checkCurrency("price.currency", p.Currency); err != nil {
			return err
		}
		if tb := p.TaxBehavior; tb != nil && *tb != "inclusive" && *tb != "exclusive" && *tb != "unspecified" {
			return Invalid("price.tax_behavior", "must be one of inclusive, exclusive, unspecified")
		}
	}
	return nil
}

func (in *ProductInput) newPrice(productID string, now time.Time) *Price {
	if in.Price == nil {
		return nil
	}
	cur, _ := checkCurrency("", in.Price.Currency) // validated already
	return &Price{
		ID:          NewID("price_"),
		ProductID:   productID,
		Amount:      *in.Price.Amount,
		Currency:    cur,
		TaxBehavior: in.Price.TaxBehavior,
		Created:     now,
	}
}

// apply copies the given fields of in onto p.
func (in *ProductInput) apply(p *Product, now time.Time) {
	setIf(&p.Name, in.Name)
	setOptional(&p.Description, in.Description)
	setOptional(&p.URL, in.URL)
	setOptional(&p.UnitLabel, in.UnitLabel)
	setOptional(&p.StatementDescriptor, in.StatementDescriptor)
	setOptional(&p.TaxCode, in.TaxCode)
	setIf(&p.Active, in.Active)
	if in.Shippable != nil {
		p.Shippable = in.Shippable
	}
	if in.Images != nil {
		p.Images = *in.Images
	}
	if in.Metadata != nil {
		p.Metadata = mergeMetadata(p.Metadata, in.Metadata)
	}
	if pr := in.newPrice(p.ID, now); pr != nil {
		p.DefaultPrice = pr
	}
}

// CreateProduct validates and screens the input and creates the product with
// its default price. Codes: validation_error, prohibited_content.
func (s *Service) CreateProduct(ctx context.Context, sc Scope, in ProductInput) (Product, error) {
	if err := in.validate(true); err != nil {
		return Product{}, err
	}
	if err := s.screen(ctx, sc, map[string]*string{"name": in.Name, "description": in.Description}); err != nil {
		return Product{}, err
	}
	now := s.clock.Now(ctx, sc)
	p := Product{ID: NewID("prod_"), Active: true, Images: []string{}, Metadata: map[string]string{}, Live: sc.Live, Created: now}
	in.apply(&p, now)
	if err := s.store.CreateProduct(ctx, sc, p); err != nil {
		return Product{}, err
	}
	return p, nil
}

// Product returns a product, archived ones included. Codes: product_not_found.
func (s *Service) Product(ctx context.Context, sc Scope, id string) (Product, error) {
	return s.store.Product(ctx, sc, id)
}

// Products lists products newest first. Codes: validation_error (unknown cursor).
func (s *Service) Products(ctx context.Context, sc Scope, lp ListParams) (Page[Product], error) {
	return s.store.Products(ctx, sc, lp)
}

// UpdateProduct changes the given fields; a price makes a new default price
// (not for a subscription product: validation_error).
// Codes: product_not_found, validation_error, prohibited_content.
func (s *Service) UpdateProduct(ctx context.Context, sc Scope, id string, in ProductInput) (Product, error) {
	if err := in.validate(false); err != nil {
		return Product{}, err
	}
	if in.Price != nil {
		if err := s.refuseRecurringPriceChange(ctx, sc, id); err != nil {
			return Product{}, err
		}
	}
	if err := s.screen(ctx, sc, map[string]*string{"name": in.Name, "description": in.Description}); err != nil {
		return Product{}, err
	}
	now := s.clock.Now(ctx, sc)
	return s.store.UpdateProduct(ctx, sc, id, func(p *Product) (Effects, error) {
		in.apply(p, now)
		return Effects{}, checkMetadata(p.Metadata) // the merge may have grown it
	})
}

// ArchiveProduct is DELETE: the product stays readable with active false and
// can no longer be sold. Codes: product_not_found.
func (s *Service) ArchiveProduct(ctx context.Context, sc Scope, id string) (Deleted, error) {
	_, err := s.store.UpdateProduct(ctx, sc, id, func(p *Product) (Effects, error) {
		p.Active = false
		return Effects{}, nil
	})
	if err != nil {
		return Deleted{}, err
	}
	return Deleted{ID: id, Deleted: true}, nil
}

func setIf[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// setOptional sets a nullable text field; "" clears it.
func setOptional(dst **string, v *string) {
	switch {
	case v == nil:
	case *v == "":
		*dst = nil
	default:
		s := *v
		*dst = &s
	}
}

// mergeMetadata applies an update Stripe's way: keys are added or replaced,
// and a key set to "" is removed.
func mergeMetadata(old, upd map[string]string) map[string]string {
	out := make(map[string]string, len(old)+len(upd))
	for k, v := range old {
		out[k] = v
	}
	for k, v := range upd {
		if v == "" {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}
