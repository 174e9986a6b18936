package dashboard

import (
	"net/http"

	"paysvc/internal/payments"
)

// subscriptionRoutes: the list, a subscription with its events, cancel and resume.
func (d *Dashboard) subscriptionRoutes() {
	d.page("GET", "/subscriptions", (*Dashboard).subscriptions)
	d.page("GET", "/subscriptions/{id}", (*Dashboard).subscription)
	d.page("POST", "/subscriptions/{id}/cancel", (*Dashboard).cancelSubscription)
	d.page("POST", "/subscriptions/{id}/resume", (*Dashboard).resumeSubscription)
}

// subscriptionStatuses are the list's filter choices ("" = all).
var subscriptionStatuses = []string{"", payments.SubActive, payments.SubTrialing, payments.SubPastDue, payments.SubUnpaid,
	payments.SubCanceled, payments.SubIncomplete, payments.SubIncompleteExpired}

type subscriptionsView struct {
	list[payments.SubscriptionObject]
	Status   string
	Statuses []string
}

func (d *Dashboard) subscriptions(rq *request) {
	lp, ok := d.listParams(rq)
	if !ok {
		return
	}
	status := rq.r.URL.Query().Get("status")
	valid := false
	for _, s := range subscriptionStatuses {
		valid = valid || s == status
	}
	if !valid {
		status = ""
	}
	l, err := d.svc.Subscriptions(rq.ctx, rq.sc, payments.SubscriptionFilter{ListParams: lp, Status: status})
	if err != nil {
		d.lookupFailed(rq, "list subscriptions", err)
		return
	}
	sv := subscriptionsView{Status: status, Statuses: subscriptionStatuses,
		list: list[payments.SubscriptionObject]{Items: l.Data, Paged: lp.StartingAfter != ""}}
	if l.HasMore && len(l.Data) > 0 {
		sv.Next = rq.r.URL.Path + "?status=" + status + "&starting_after=" + l.Data[len(l.Data)-1].ID
	}
	d.show(rq, "subscriptions.html", rq.view("Subscriptions", "subscriptions", sv))
}

type subscriptionView struct {
	Sub    payments.SubscriptionObject
	Events []eventSummary
}

func (d *Dashboard) subscriptionData(rq *request, id string) (*subscriptionView, error) {
	sub, err := d.svc.Subscription(rq.ctx, rq.sc, id)
	if err != nil {
		return nil, err
	}
	evs, err := d.svc.ObjectEvents(rq.ctx, rq.sc, id, eventsShown)
	if err != nil {
		return nil, err
	}
	return &subscriptionView{Sub: sub.Object(), Events: summarizeAll(evs)}, nil
}

func (d *Dashboard) subscription(rq *request) {
	actionPage(d, rq, "Subscription", "subscriptions", "subscription.html", "read subscription", d.subscriptionData)
}

// cancelSubscription cancels at the period's end (the default) or now,
// with the API's rules.
func (d *Dashboard) cancelSubscription(rq *request) {
	atEnd := rq.r.PostFormValue("when") != "now"
	what := "cancel_now"
	if atEnd {
		what = "cancel_end"
	}
	d.changeSubscription(rq, what, func(id string) error {
		_, err := d.svc.CancelSubscription(rq.ctx, rq.sc, id, payments.CancelInput{AtPeriodEnd: &atEnd})
		return err
	})
}

// resumeSubscription withdraws a cancellation scheduled for the period's end.
func (d *Dashboard) resumeSubscription(rq *request) {
	d.changeSubscription(rq, "resume", func(id string) error {
		_, err := d.svc.ResumeSubscription(rq.ctx, rq.sc, id)
		return err
	})
}

func (d *Dashboard) changeSubscription(rq *request, what string, change func(id string) error) {
	id, ok := d.objectID(rq)
	if !ok {
		return
	}
	err := change(id)
	switch code := payments.ErrorCode(err); {
	case err == nil:
		d.audit(rq, "subscription."+what, id)
		http.Redirect(rq.w, rq.r, rq.base()+"/subscriptions/"+id+"?done=sub_"+what, http.StatusSeeOther)
	case code == payments.SubscriptionNotFound:
		d.notFound(rq.w, rq.r)
	case code == "":
		d.internal(rq.w, rq.r, what+" subscription", err)
	default:
		sv, rerr := d.subscriptionData(rq, id)
		if rerr != nil {
			d.lookupFailed(rq, "read subscription", rerr)
			return
		}
		d.show(rq, "subscription.html", rq.view("Subscription "+id, "subscriptions", sv).fail(err))
	}
}
