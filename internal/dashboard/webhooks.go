package dashboard

import (
	"net/http"
	"strings"

	"paysvc/internal/payments"
)

// webhookRoutes: endpoints, their delivery log and resend, secret rotation.
func (d *Dashboard) webhookRoutes() {
	d.page("GET", "/webhooks", (*Dashboard).webhooks)
	d.page("POST", "/webhooks", (*Dashboard).createEndpoint)
	d.page("GET", "/webhooks/{id}", (*Dashboard).endpoint)
	d.page("POST", "/webhooks/{id}/status", (*Dashboard).endpointStatus)
	d.page("POST", "/webhooks/{id}/delete", (*Dashboard).deleteEndpoint)
	d.page("POST", "/webhooks/{id}/rotate", (*Dashboard).rotateSecret)
	d.page("GET", "/webhooks/{id}/deliveries/{delivery}", (*Dashboard).delivery)
	d.page("POST", "/webhooks/{id}/deliveries/{delivery}/resend", (*Dashboard).resend)
}

type webhooksView struct {
	Endpoints []payments.EndpointObject
	Created   *payments.EndpointObject // just added: its secret's only showing
	URL       string                   // the add form's fields, kept after an error
	Events    string
	Desc      string
}

func (d *Dashboard) webhooksPage(rq *request, wv *webhooksView, err error) {
	eps, lerr := d.svc.Endpoints(rq.ctx, rq.sc)
	if lerr != nil {
		d.internal(rq.w, rq.r, "list endpoints", lerr)
		return
	}
	wv.Endpoints = eps
	v := rq.view("Webhooks", "webhooks", wv)
	v.Notice = notices[rq.r.URL.Query().Get("done")]
	if err != nil {
		v.fail(err)
	}
	if wv.Created != nil {
		v.Status = http.StatusCreated
	}
	d.show(rq, "webhooks.html", v)
}

func (d *Dashboard) webhooks(rq *request) { d.webhooksPage(rq, &webhooksView{Events: "*"}, nil) }

// createEndpoint adds an endpoint with the API's rules (https, allowed
// address, known event types, the per-mode maximum) and shows its signing
// secret once.
func (d *Dashboard) createEndpoint(rq *request) {
	wv := &webhooksView{URL: strings.TrimSpace(rq.r.PostFormValue("url")),
		Events: rq.r.PostFormValue("events"), Desc: strings.TrimSpace(rq.r.PostFormValue("description"))}
	in := payments.EndpointInput{URL: &wv.URL}
	// Event types separated by commas, spaces or lines; empty is every one.
	if evs := strings.FieldsFunc(wv.Events, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' }); len(evs) > 0 {
		in.Events = evs
	}
	if wv.Desc != "" {
		in.Description = &wv.Desc
	}
	e, err := d.svc.CreateEndpoint(rq.ctx, rq.sc, in)
	if err != nil && payments.ErrorCode(err) == "" {
		d.internal(rq.w, rq.r, "create endpoint", err)
		return
	}
	if err == nil {
		d.audit(rq, "webhook_endpoint.create", e.ID)
		wv = &webhooksView{Created: &e, Events: "*"}
	}
	d.webhooksPage(rq, wv, err)
}

type endpointView struct {
	Endpoint   payments.EndpointObject
	Secret     string // a rotation's new secret: its only showing
	Deliveries list[payments.DeliveryObject]
	Status     string // the delivery log's filter
}

// endpointData reads an endpoint and a page of its delivery log, newest
// first, filtered by ?status.
func (d *Dashboard) endpointData(rq *request, id string) (*endpointView, error) {
	e, err := d.svc.Endpoint(rq.ctx, rq.sc, id)
	if err != nil {
		return nil, err
	}
	q := rq.r.URL.Query()
	f := payments.DeliveryFilter{ListParams: payments.ListParams{Limit: pageSize, StartingAfter: q.Get("starting_after")}}
	if st, err := payments.ParseDeliveryStatus(q.Get("status")); err == nil {
		f.Status = st
	}
	if f.StartingAfter != "" && !idPattern.MatchString(f.StartingAfter) {
		f.StartingAfter = ""
	}
	p, err := d.svc.EndpointDeliveries(rq.ctx, rq.sc, id, f)
	if err != nil {
		return nil, err
	}
	ev := &endpointView{Endpoint: e, Status: f.Status,
		Deliveries: list[payments.DeliveryObject]{Paged: f.StartingAfter != ""}}
	for _, rec := range p.Data {
		ev.Deliveries.Items = append(ev.Deliveries.Items, rec.Object())
	}
	if p.HasMore && len(p.Data) > 0 {
		ev.Deliveries.Next = rq.r.URL.Path + "?status=" + f.Status + "&starting_after=" + p.Data[len(p.Data)-1].ID
	}
	return ev, nil
}

func (d *Dashboard) endpoint(rq *request) {
	actionPage(d, rq, "Webhook endpoint", "webhooks", "endpoint.html", "read endpoint", d.endpointData)
}

// rotationGraces are the rotate form's choices of how long the old secret
// keeps signing too, in seconds (the API takes 0 to 7 days).
var rotationGraces = map[string]int64{"0": 0, "3600": 3600, "86400": 86400, "604800": 604800}

// rotateSecret gives the endpoint a new signing secret, shown this once;
// during the grace period deliveries are signed with both.
func (d *Dashboard) rotateSecret(rq *request) {
	id, ok := d.objectID(rq)
	if !ok {
		return
	}
	in := payments.RotateInput{}
	if g, ok := rotationGraces[rq.r.PostFormValue("grace_period")]; ok {
		in.GracePeriod = &g
	}
	e, err := d.svc.RotateEndpointSecret(rq.ctx, rq.sc, id, in)
	if payments.ErrorCode(err) == payments.EndpointNotFound {
		d.notFound(rq.w, rq.r)
		return
	}
	if err != nil && payments.ErrorCode(err) == "" {
		d.internal(rq.w, rq.r, "rotate endpoint secret", err)
		return
	}
	ev, rerr := d.endpointData(rq, id)
	if rerr != nil {
		d.lookupFailed(rq, "read endpoint", rerr)
		return
	}
	v := rq.view("Webhook endpoint "+id, "webhooks", ev)
	if err != nil {
		d.show(rq, "endpoint.html", v.fail(err))
		return
	}
	d.audit(rq, "webhook_endpoint.rotate_secret", id)
	ev.Secret = e.Secret
	v.Notice = "Signing secret rotated."
	d.show(rq, "endpoint.html", v)
}

// maxRequestShown bounds the request body a delivery's page shows (the
// event's payload; its whole self is on the event's page).
const maxRequestShown = 2048

type deliveryView struct {
	EndpointID string
	Delivery   payments.DeliveryObject
	Attempts   []payments.AttemptObject
	Request    string // the start of the body each attempt POSTed
	Truncated  bool
}

// delivery shows one delivery with every attempt: status code, error,
// the start of the response, and the request it sent.
func (d *Dashboard) delivery(rq *request) {
	_, did, dv, ok := d.deliveryOf(rq)
	if !ok {
		return
	}
	v := rq.view("Delivery "+did, "webhooks", dv)
	v.Notice = notices[rq.r.URL.Query().Get("done")]
	d.show(rq, "delivery.html", v)
}

// deliveryOf reads the delivery the path names under its endpoint, or
// answers (not found, or the lookup's failure) and returns false.
func (d *Dashboard) deliveryOf(rq *request) (endpointID, deliveryID string, dv *deliveryView, ok bool) {
	id, ok := d.objectID(rq)
	if !ok {
		return "", "", nil, false
	}
	did := rq.r.PathValue("delivery")
	if !idPattern.MatchString(did) {
		d.notFound(rq.w, rq.r)
		return "", "", nil, false
	}
	dv, err := d.deliveryData(rq, id, did)
	if err != nil {
		d.lookupFailed(rq, "read delivery", err)
		return "", "", nil, false
	}
	return id, did, dv, true
}

func (d *Dashboard) deliveryData(rq *request, endpointID, deliveryID string) (*deliveryView, error) {
	del, err := d.svc.EndpointDelivery(rq.ctx, rq.sc, endpointID, deliveryID)
	if err != nil {
		return nil, err
	}
	dv := &deliveryView{EndpointID: endpointID, Delivery: del}
	if del.AttemptLog != nil {
		dv.Attempts = *del.AttemptLog
	}
	// The event may have been pruned by retention since: the log stays.
	if ev, err := d.svc.Event(rq.ctx, rq.sc, del.Event); err == nil {
		dv.Request = prettyJSON(ev.Payload)
		if len(dv.Request) > maxRequestShown {
			dv.Request, dv.Truncated = strings.ToValidUTF8(dv.Request[:maxRequestShown], ""), true
		}
	}
	return dv, nil
}

// resend sends a delivery's event to its endpoint again, as a new delivery
// through the same queue and retries (the API's POST /v1/events/{id}/resend).
func (d *Dashboard) resend(rq *request) {
	id, did, dv, ok := d.deliveryOf(rq)
	if !ok {
		return
	}
	nd, err := d.svc.ResendEvent(rq.ctx, rq.sc, dv.Delivery.Event, payments.ResendInput{Endpoint: &id})
	if err != nil {
		if payments.ErrorCode(err) == "" {
			d.internal(rq.w, rq.r, "resend event", err)
			return
		}
		d.show(rq, "delivery.html", rq.view("Delivery "+did, "webhooks", dv).fail(err))
		return
	}
	d.audit(rq, "event.resend", nd.ID)
	http.Redirect(rq.w, rq.r, rq.base()+"/webhooks/"+id+"/deliveries/"+nd.ID+"?done=resent", http.StatusSeeOther)
}

// endpointStatus re-enables a disabled endpoint (its failure count starts
// again) or disables one.
func (d *Dashboard) endpointStatus(rq *request) {
	id, ok := d.objectID(rq)
	if !ok {
		return
	}
	status := rq.r.PostFormValue("status")
	_, err := d.svc.UpdateEndpoint(rq.ctx, rq.sc, id, payments.EndpointUpdate{Status: &status})
	if err != nil {
		if payments.ErrorCode(err) == payments.EndpointNotFound {
			d.notFound(rq.w, rq.r)
			return
		}
		if payments.ErrorCode(err) == "" {
			d.internal(rq.w, rq.r, "update endpoint", err)
			return
		}
		e, rerr := d.svc.Endpoint(rq.ctx, rq.sc, id)
		if rerr != nil {
			d.lookupFailed(rq, "read endpoint", rerr)
			return
		}
		d.show(rq, "endpoint.html", rq.view("Webhook endpoint "+id, "webhooks", endpointView{Endpoint: e}).fail(err))
		return
	}
	d.audit(rq, "webhook_endpoint."+status, id)
	http.Redirect(rq.w, rq.r, rq.base()+"/webhooks/"+id+"?done=endpoint_"+status, http.StatusSeeOther)
}

func (d *Dashboard) deleteEndpoint(rq *request) {
	id, ok := d.objectID(rq)
	if !ok {
		return
	}
	if _, err := d.svc.DeleteEndpoint(rq.ctx, rq.sc, id); err != nil {
		if payments.ErrorCode(err) != "" {
			d.notFound(rq.w, rq.r)
			return
		}
		d.internal(rq.w, rq.r, "delete endpoint", err)
		return
	}
	d.audit(rq, "webhook_endpoint.delete", id)
	http.Redirect(rq.w, rq.r, rq.base()+"/webhooks?done=endpoint_deleted", http.StatusSeeOther)
}
