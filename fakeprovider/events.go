package fakeprovider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// The event log.
//
// Like Stripe, the Fake keeps an event for every state change of a
// charge, a refund or a dispute, whether or not any webhook announces it:
// the changes a Server announces (see Server's webhooks), and those it
// never does (ChargeOutside, SetStatus, RefundOutside, SetRefundStatus,
// OpenDispute, MoveDispute with webhooks false), and those made before any
// Server watched. A webhook is a copy of its log event, same id and
// payload, so that a webhook that is dropped, or never sent, is still in
// the log, and an event listed and delivered is one event to a receiver.
// ListEvents (in-process) and a Server's GET /v1/events list the log,
// newest first, as Stripe lists its events. Events are kept for ever;
// Stripe keeps 30 days.
//
// A charge's change makes one event, a refund's or a dispute's one or two
// (see refundEventTypes and the table of webhooks.go); a settlement is
// logged when the Fake settles the charge, which it does when it is
// looked at (a read, a Tick, a listing of events), created at its
// SettlesAt. So a listing settles first what is due, and an event created
// before the listing began is in it.

// loggedEvent is one event of the log.
type loggedEvent struct {
	WebhookEvent                // ID, Type, ids, Status, Created and Payload
	seq          int            // place in the log, from 1: the cursor of pages
	ev           provider.Event // as the in-process listing returns it
}

// nextEventID returns the id of a new event. Call with f.mu held.
func (f *Fake) nextEventID() string {
	f.eventSeq++
	return f.newID("evt_", f.eventSeq)
}

// logEvent appends to the log the event of type typ about object,
// carrying the idempotency key key (none when ""), translated in-process
// as ev (its ID, Type, Created and Digest filled here). Call with f.mu
// held.
func (f *Fake) logEvent(info WebhookEvent, object any, key string, ev provider.Event) *loggedEvent {
	info.ID, info.Account = f.nextEventID(), f.account
	obj, err := json.Marshal(object)
	if err != nil { // plain structs: cannot fail
		panic(fmt.Sprintf("fakeprovider: marshal event object: %v", err))
	}
	info.Payload = renderEvent(info, obj, key)
	ev.ID, ev.Type, ev.Created, ev.Account = info.ID, info.Type, info.Created.UTC().Truncate(time.Second), info.Account
	ev.Digest = eventDigest(info.ID, info.Type, info.Created.Unix(), obj)
	l := &loggedEvent{WebhookEvent: info, seq: f.eventSeq, ev: ev}
	f.eventLog = append(f.eventLog, l)
	f.eventByID[l.ID] = l
	return l
}

// renderEvent renders the event info about the object obj (its JSON),
// carrying the idempotency key key (none when ""), as Stripe sends it to
// a webhook endpoint and lists it.
func renderEvent(info WebhookEvent, obj []byte, key string) []byte {
	body := stripeEvent{
		ID:              info.ID,
		Object:          "event",
		Account:         info.Account,
		APIVersion:      APIVersion,
		Created:         info.Created.Unix(),
		Livemode:        false,
		PendingWebhooks: 1,
		Type:            info.Type,
	}
	body.Data.Object = json.RawMessage(obj)
	if key != "" {
		body.Request.IdempotencyKey = &key
	}
	b, err := json.Marshal(body)
	if err != nil { // plain structs: cannot fail
		panic(fmt.Sprintf("fakeprovider: marshal event: %v", err))
	}
	return b
}

// eventDigest is the digest provider/stripe makes of an event (its
// Digest): the hex SHA-256 of its id, type and creation time, each ended
// by a NUL byte, then its data.object's JSON.
func eventDigest(id, typ string, created int64, obj []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", id, typ, created)
	h.Write(obj)
	return hex.EncodeToString(h.Sum(nil))
}

// logCharge logs the event of c's change to status at at (its creation
// when created: the event carries the request's key). Call with f.mu
// held.
func (f *Fake) logCharge(c Charge, status string, at time.Time, created bool) []*loggedEvent {
	key := ""
	if created {
		key = c.IdempotencyKey
	}
	ev := provider.Event{
		Outcome: outcomeOf(status), PaymentID: c.ID, PurchaseID: c.PurchaseID,
		Amount: c.Amount, Currency: c.Currency,
	}
	info := WebhookEvent{Type: eventType(status), PaymentID: c.ID, PurchaseID: c.PurchaseID, Status: status, Created: at}
	return []*loggedEvent{f.logEvent(info, renderPI(c, status), key, ev)}
}

// logRefund logs the events of r's change to its status at at (see
// refundEventTypes), pay being its payment's charge and refunds every
// refund of the payment, r among them. Call with f.mu held.
func (f *Fake) logRefund(r Refund, pay Charge, refunds []Refund, at time.Time, created bool) []*loggedEvent {
	key := ""
	if created {
		key = r.IdempotencyKey
	}
	var out []*loggedEvent
	for _, typ := range refundEventTypes(r.Status, created) {
		info := WebhookEvent{Type: typ, PaymentID: r.PaymentID, PurchaseID: r.PurchaseID, RefundID: r.ID, Status: r.Status, Created: at}
		var object any = renderRefund(r, r.Status)
		about := r
		if typ == chargeRefunded {
			object = renderCharge(pay, refunds)
			about = latestRefund(refunds)
		}
		res := refundResult(about, about.Status)
		ev := provider.Event{
			Outcome: res.Outcome, PaymentID: res.PaymentID, PurchaseID: res.PurchaseID,
			Amount: res.Amount, Currency: res.Currency, Refund: &res,
		}
		out = append(out, f.logEvent(info, object, key, ev))
	}
	return out
}

// latestRefund is the refund a charge.refunded event is about, as
// provider/stripe reads it: of the charge's refunds, listed newest first,
// the first of those created in the latest second.
func latestRefund(refunds []Refund) Refund {
	var latest Refund
	found := false
	for _, r := range slices.Backward(refunds) {
		if !found || r.CreatedAt.Unix() > latest.CreatedAt.Unix() {
			latest, found = r, true
		}
	}
	return latest
}

// ListEvents implements provider.Provider over the event log (see the
// comment above): the events created at or after q.Since (by the Unix
// second, as Stripe filters), of q.Types (provider.EventTypes when
// empty), newest first, after the cursor q.After, at most q.Limit
// (provider.MaxEventPage when 0). It settles first what is due. An event
// of a charge whose metadata names no purchase (one made outside
// payrecon) is listed with no PurchaseID, as provider/stripe lists it, for
// the inbox to store unmatched; the fake refuses none. It counts as an OpEventList call and takes
// from the fake's list rate limit.
//
// A zero Since, a Limit outside [0, provider.MaxEventPage], more than 20
// types, or an After the log does not hold is refused (an error wrapping
// ErrInvalidRequest).
func (f *Fake) ListEvents(ctx context.Context, q provider.EventQuery) (provider.EventPage, error) {
	if err := f.admit(ctx, provider.OpEventList); err != nil {
		return provider.EventPage{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[provider.OpEventList]++
	if err := ctx.Err(); err != nil {
		return provider.EventPage{}, fmt.Errorf("fakeprovider: list events: not sent: %w", err)
	}
	eq, err := f.eventQuery(q)
	if err != nil {
		return provider.EventPage{}, err
	}
	found, hasMore := f.listEvents(eq)
	page := provider.EventPage{HasMore: hasMore}
	for _, l := range found {
		page.Next = l.ID
		ev := l.ev
		if ev.Refund != nil {
			rf := *ev.Refund
			ev.Refund = &rf
		}
		if ev.Dispute != nil {
			d := *ev.Dispute
			ev.Dispute = &d
		}
		ev.Payload = string(l.Payload)
		page.Events = append(page.Events, ev)
	}
	return page, nil
}

// eventQuery is an event listing's filters and page, as the log reads
// them.
type eventQuery struct {
	since int64 // created[gte], Unix seconds
	types []string
	after int // seq of the starting_after event; 0 for none
	limit int
}

// eventQuery checks q and returns it as the log reads it. Call with f.mu
// held.
func (f *Fake) eventQuery(q provider.EventQuery) (eventQuery, error) {
	types := q.Types
	if len(types) == 0 {
		types = provider.EventTypes
	}
	limit := q.Limit
	if limit == 0 {
		limit = provider.MaxEventPage
	}
	switch {
	case q.Since.IsZero():
		return eventQuery{}, fmt.Errorf("%w: list events: no since", ErrInvalidRequest)
	case limit < 1 || limit > provider.MaxEventPage:
		return eventQuery{}, fmt.Errorf("%w: list events: limit %d outside [1, %d]", ErrInvalidRequest, q.Limit, provider.MaxEventPage)
	case len(types) > maxEventTypes:
		return eventQuery{}, fmt.Errorf("%w: list events: %d types, at most %d", ErrInvalidRequest, len(types), maxEventTypes)
	}
	eq := eventQuery{since: q.Since.Unix(), types: types, limit: limit}
	if q.After != "" {
		l := f.eventByID[q.After]
		if l == nil {
			return eventQuery{}, fmt.Errorf("%w: list events: no such event %q", ErrInvalidRequest, q.After)
		}
		eq.after = l.seq
	}
	return eq, nil
}

// maxEventTypes is the most types one listing takes, as Stripe's.
const maxEventTypes = 20

// listEvents settles what is due and returns the page of the log q asks
// for, newest first, and whether older events match beyond it. Call with
// f.mu held.
func (f *Fake) listEvents(q eventQuery) ([]*loggedEvent, bool) {
	f.settleDue(f.cfg.Now())
	var out []*loggedEvent
	for _, l := range slices.Backward(f.eventLog) {
		if q.after != 0 && l.seq >= q.after {
			continue
		}
		if l.Created.Unix() < q.since || !slices.Contains(q.types, l.Type) {
			continue
		}
		if len(out) == q.limit {
			return out, true
		}
		out = append(out, l)
	}
	return out, false
}

// EventLog returns every event of the log, oldest first, dropped
// webhooks and changes no webhook announced included.
func (f *Fake) EventLog() []WebhookEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]WebhookEvent, len(f.eventLog))
	for i, l := range f.eventLog {
		out[i] = l.WebhookEvent
		out[i].Payload = slices.Clone(l.Payload)
	}
	return out
}

// eventList is a page of GET /v1/events as Stripe renders it.
type eventList struct {
	Object  string            `json:"object"`
	URL     string            `json:"url"`
	HasMore bool              `json:"has_more"`
	Data    []json.RawMessage `json:"data"`
}

// listEvents serves GET /v1/events: the event log, newest first, with
// Stripe's filters: the created bounds, type (one type, or a prefix and
// ".*": "refund.*") or types[] (several, at most 20; not both), limit,
// starting_after and ending_before. A type filter that names none
// selects every event: the type filter is Stripe's, not ListEvents'
// default.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	rest := url.Values{}
	var types []string
	for name, vs := range q {
		if name == "types[]" || strings.HasPrefix(name, "types[") && strings.HasSuffix(name, "]") && isDigits(name[len("types["):len(name)-1]) {
			types = append(types, vs...)
			continue
		}
		rest[name] = vs
	}
	lq, bad := parseListQuery(rest, "event", s.fake.eventSeqOf, "type")
	if bad != nil {
		writeError(w, http.StatusBadRequest, *bad)
		return
	}
	typ := rest.Get("type")
	switch {
	case typ != "" && len(types) > 0:
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_invalid_string", Param: "types",
			Message: "You may pass either `type` or `types`, but not both."})
		return
	case len(types) > maxEventTypes:
		writeError(w, http.StatusBadRequest, apiError{Type: "invalid_request_error", Code: "parameter_invalid_array", Param: "types",
			Message: fmt.Sprintf("types: at most %d types, got %d", maxEventTypes, len(types))})
		return
	}
	match := func(t string) bool {
		switch {
		case len(types) > 0:
			return slices.Contains(types, t)
		case strings.HasSuffix(typ, ".*"):
			return strings.HasPrefix(t, strings.TrimSuffix(typ, "*"))
		case typ != "":
			return t == typ
		}
		return true
	}
	found, err := s.fake.listEventLog(r.Context(), lq.keep, match)
	if err != nil { // the client is gone
		dropConnection(w)
		return
	}
	page, hasMore := pageOf(found, func(l *loggedEvent) int { return l.seq }, lq)
	res := eventList{Object: "list", URL: "/v1/events", HasMore: hasMore, Data: []json.RawMessage{}}
	for _, l := range page {
		res.Data = append(res.Data, json.RawMessage(l.Payload))
	}
	writeJSON(w, http.StatusOK, res)
}

// isDigits reports whether s is one or more decimal digits.
func isDigits(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool { return r < '0' || r > '9' })
}

// listEventLog is ListEvents for the HTTP front end: every event whose
// created unix second keep accepts and whose type match accepts, newest
// first, after settling what is due. It counts as an OpEventList call.
func (f *Fake) listEventLog(ctx context.Context, keep func(created int64) bool, match func(typ string) bool) ([]*loggedEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[provider.OpEventList]++
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.settleDue(f.cfg.Now())
	var out []*loggedEvent
	for _, l := range slices.Backward(f.eventLog) {
		if keep(l.Created.Unix()) && match(l.Type) {
			out = append(out, l)
		}
	}
	return out, nil
}

// eventSeqOf returns the place in the log of the event id.
func (f *Fake) eventSeqOf(id string) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l := f.eventByID[id]; l != nil {
		return l.seq, true
	}
	return 0, false
}
