package dashboard

import "paysvc/internal/payments"

// settingsView is the settings page: the connected account of the mode
// (GET /v1/account's service) and who is signed in.
type settingsView struct {
	Account *payments.AccountObject
}

// settings shows the mode's connected account at the processor. A
// processor that cannot answer is a message on the page, not an error
// page: the rest of the dashboard does not depend on it.
func (d *Dashboard) settings(rq *request) {
	v := rq.view("Settings", "settings", nil)
	a, err := d.svc.Account(rq.ctx, rq.sc)
	switch {
	case err == nil:
		v.Data = settingsView{Account: &a}
	case payments.ErrorCode(err) != "":
		v.Data = settingsView{}
		v.fail(err)
	default:
		d.log.ErrorContext(rq.ctx, "read connected account", "merchant_id", rq.sc.MerchantID, "error", err)
		v.Data = settingsView{}
		v.Error, v.Code = "The processor did not answer; try again in a moment.", string(payments.ProcessorError)
	}
	d.show(rq, "settings.html", v)
}
