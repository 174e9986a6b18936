package payments

// The API shapes of sessions and payments live here, beside the types,
// because events carry the object exactly as the API returns it.

// SessionObject is a payment session as the API returns it.
type SessionObject struct {
	ID              string            `json:"id"`
	URL             *string           `json:"url"`
	Status          string            `json:"status"`
	PaymentStatus   string            `json:"payment_status"`
	Mode            string            `json:"mode"`
	AmountSubtotal  int64             `json:"amount_subtotal"`
	AmountTotal     int64             `json:"amount_total"`
	Currency        string            `json:"currency"`
	Customer        *string           `json:"customer"`
	CustomerEmail   *string           `json:"customer_email"`
	PaymentIntent   *string           `json:"payment_intent"`
	Subscription    *string           `json:"subscription"`
	TrialPeriodDays *int              `json:"trial_period_days"`
	LineItems       []LineItem        `json:"line_items"`
	PassFees        bool              `json:"pass_fees_to_customer"`
	ShippingOptions []ShippingOption  `json:"shipping_options"`
	ShippingDetails *ShippingDetails  `json:"shipping_details"`
	BillingDetails  *Address          `json:"billing_details"`
	SuccessURL      string            `json:"success_url"`
	CancelURL       string            `json:"cancel_url"`
	Metadata        map[string]string `json:"metadata"`
	ExpiresAt       int64             `json:"expires_at"`
	Livemode        bool              `json:"livemode"`
	Created         int64             `json:"created"`
}

// Object returns the session's API shape; its url is null once it is closed.
func (cs CheckoutSession) Object() SessionObject {
	o := SessionObject{
		ID: cs.ID, Status: cs.Status, PaymentStatus: cs.PaymentStatus, Mode: "payment",
		AmountSubtotal: cs.AmountSubtotal, AmountTotal: cs.AmountTotal, Currency: cs.Currency,
		Customer: cs.CustomerID, CustomerEmail: cs.CustomerEmail, PaymentIntent: cs.PaymentIntentID,
		Subscription: cs.SubscriptionID, LineItems: cs.LineItems, PassFees: cs.PassFees,
		ShippingOptions: cs.ShippingOptions, ShippingDetails: cs.Shipping, BillingDetails: cs.Billing,
		SuccessURL: cs.SuccessURL, CancelURL: cs.CancelURL, Metadata: nonNilMap(cs.Metadata),
		ExpiresAt: cs.ExpiresAt.Unix(), Livemode: cs.Live, Created: cs.Created.Unix(),
	}
	if cs.Mode == ModeSubscription {
		o.Mode, o.TrialPeriodDays = ModeSubscription, cs.TrialPeriodDays
	}
	if o.LineItems == nil {
		o.LineItems = []LineItem{}
	}
	if o.ShippingOptions == nil {
		o.ShippingOptions = []ShippingOption{}
	}
	if cs.Status == SessionOpen {
		u := cs.URL
		o.URL = &u
	}
	return o
}

// PaymentObject is a payment as the API returns it (the Payment of the spec).
type PaymentObject struct {
	ID             string            `json:"id"`
	Amount         int64             `json:"amount"`
	AmountReceived int64             `json:"amount_received"`
	Currency       string            `json:"currency"`
	Status         string            `json:"status"`
	Customer       *string           `json:"customer"`
	CustomerName   *string           `json:"customer_name"`
	CustomerEmail  *string           `json:"customer_email"`
	Description    *string           `json:"description"`
	PaymentSession *string           `json:"payment_session"`
	Subscription   *string           `json:"subscription"`
	FeeAmount      int64             `json:"fee_amount"`
	AmountRefunded int64             `json:"amount_refunded"`
	Dispute        *string           `json:"dispute"`
	LastDecline    *string           `json:"last_decline_code"`
	Metadata       map[string]string `json:"metadata"`
	Created        int64             `json:"created"`
	Livemode       bool              `json:"livemode"`
}

// Object returns the payment's API shape.
func (pi PaymentIntent) Object() PaymentObject {
	return PaymentObject{
		ID: pi.ID, Amount: pi.Amount, AmountReceived: pi.AmountReceived, Currency: pi.Currency, Status: pi.Status,
		Customer: pi.CustomerID, CustomerName: pi.CustomerName, CustomerEmail: pi.CustomerEmail,
		Description: pi.Description, PaymentSession: pi.SessionID, Subscription: pi.SubscriptionID, FeeAmount: pi.Fee, AmountRefunded: pi.AmountRefunded,
		Dispute: pi.DisputeID, LastDecline: pi.LastDeclineCode,
		Metadata: nonNilMap(pi.Metadata), Created: pi.Created.Unix(), Livemode: pi.Live,
	}
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
