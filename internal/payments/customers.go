package payments

import (
	"context"
	"time"
	"unicode/utf8"
)

// maxPhoneLen bounds a customer's phone, in characters.
const maxPhoneLen = 40

// Customer is a buyer of the merchant.
type Customer struct {
	ID       string
	Email    *string
	Name     *string
	Phone    *string
	Metadata map[string]string
	Live     bool
	Created  time.Time
}

// CustomerObject is a customer as the API returns it.
type CustomerObject struct {
	ID       string            `json:"id"`
	Email    *string           `json:"email"`
	Name     *string           `json:"name"`
	Phone    *string           `json:"phone"`
	Metadata map[string]string `json:"metadata"`
	Livemode bool              `json:"livemode"`
	Created  int64             `json:"created"`
}

// Object returns the customer's API shape.
func (c Customer) Object() CustomerObject {
	return CustomerObject{
		ID: c.ID, Email: c.Email, Name: c.Name, Phone: c.Phone, Metadata: nonNilMap(c.Metadata),
		Livemode: c.Live, Created: c.Created.Unix(),
	}
}

// CustomerInput is the body of a customer create or update; nil means not given.
type CustomerInput struct {
	Email    *string       `json:"email"`
	Name     *string       `json:"name"`
	Phone    *string       `json:"phone"`
	Metadata MetadataInput `json:"metadata"`
}

func (in *CustomerInput) validate(create bool) error {
	if in.Email == nil && create {
		return Invalid("email", "is required")
	}
	if in.Email != nil {
		if err := checkEmail("email", *in.Email); err != nil {
			return err
		}
	}
	if err := checkText("name", in.Name, false); err != nil {
		return err
	}
	if err := checkText("phone", in.Phone, false); err != nil {
		return err
	}
	if in.Phone != nil && utf8.RuneCountInString(*in.Phone) > maxPhoneLen {
		return Invalid("phone", "must be at most %d characters", maxPhoneLen)
	}
	return checkMetadata(in.Metadata)
}

func (in *CustomerInput) apply(c *Customer) {
	setOptional(&c.Email, in.Email)
	setOptional(&c.Name, in.Name)
	setOptional(&c.Phone, in.Phone)
	if in.Metadata != nil {
		c.Metadata = mergeMetadata(c.Metadata, in.Metadata)
	}
}

// CreateCustomer creates a customer. Codes: validation_error.
func (s *Service) CreateCustomer(ctx context.Context, sc Scope, in CustomerInput) (Customer, error) {
	if err := in.validate(true); err != nil {
		return Customer{}, err
	}
	c := Customer{ID: NewID("cus_"), Metadata: map[string]string{}, Live: sc.Live, Created: s.clock.Now(ctx, sc)}
	in.apply(&c)
	if err := s.store.CreateCustomer(ctx, sc, c); err != nil {
		return Customer{}, err
	}
	return c, nil
}

// Customer returns a customer that is not deleted. Codes: customer_not_found.
func (s *Service) Customer(ctx context.Context, sc Scope, id string) (Customer, error) {
	return s.store.Customer(ctx, sc, id)
}

// Customers lists customers newest first. Codes: validation_error (unknown cursor).
func (s *Service) Customers(ctx context.Context, sc Scope, lp ListParams) (Page[Customer], error) {
	return s.store.Customers(ctx, sc, lp)
}

// UpdateCustomer changes the given fields. Codes: customer_not_found, validation_error.
func (s *Service) UpdateCustomer(ctx context.Context, sc Scope, id string, in CustomerInput) (Customer, error) {
	if err := in.validate(false); err != nil {
		return Customer{}, err
	}
	return s.store.UpdateCustomer(ctx, sc, id, func(c *Customer) (Effects, error) {
		in.apply(c)
		return Effects{}, checkMetadata(c.Metadata)
	})
}

// DeleteCustomer deletes a customer: it answers 404 from then on.
// Codes: customer_not_found.
func (s *Service) DeleteCustomer(ctx context.Context, sc Scope, id string) (Deleted, error) {
	if err := s.store.DeleteCustomer(ctx, sc, id, s.clock.Now(ctx, sc)); err != nil {
		return Deleted{}, err
	}
	return Deleted{ID: id, Deleted: true}, nil
}
