package fakeprovider

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Webhooks.
//
// When ServerConfig.WebhookURL is set, every state change of a charge in
// the Fake's ledger becomes a Stripe event, POSTed to the URL signed with
// ServerConfig.WebhookSecret:
//
//	charge created succeeded                 payment_intent.succeeded
//	charge created declined                  payment_intent.payment_failed (requires_payment_method)
//	charge created processing                payment_intent.processing
//	charge created requires_action           payment_intent.requires_action
//	charge created canceled                  payment_intent.canceled
//	processing charge settles                payment_intent.succeeded or .payment_failed
//	SetStatus moves a charge                 the event of its new status, as above
//
// and every state change of a refund (see refundEventTypes):
//
//	refund created                           refund.created (the Refund), then
//	                                         refund.failed if it failed at once, or
//	                                         charge.refunded (the Charge, its
//	                                         refunds listed) if it succeeded at once
//	refund settles or moves to succeeded     refund.updated, charge.refunded
//	refund settles or moves to failed        refund.failed
//	refund moves to another status           refund.updated
//
// The Fake logs every change of its ledger while a Server with webhooks
// watches it: a charge's creation (by a create, or by ChargeOutside), its
// settlement, a move by SetStatus. The server turns the log into events
// when it looks: after each create it serves, at each Tick, and at once
// for Server.ChargeOutside and Server.SetStatus. So changes made by
// direct Fake calls (Create, ChargeOutside, SetStatus, or a Status read
// that settles a charge) are announced too, at the next look, in the order
// they were made; changes made before NewServer are not. Only
// Server.ChargeOutside and Server.SetStatus with webhooks false (and
// their HTTP forms with webhooks=false) make a change that is never
// announced: the charge a dashboard made without the endpoint hearing of
// it. Refunds are announced alike (RefundOutside, SetRefundStatus and
// their Server forms). A charge's or refund's creation event carries the
// request's idempotency key
// (request.idempotency_key); a settlement or a move carries none, like
// Stripe's automatic events, and a settlement is created at the charge's
// SettlesAt, a move when it was made. request.id is always null.
//
// Delivery is Stripe's: a copy of an event is retried, with backoff, until
// a 2xx answer or WebhookMaxAttempts attempts; each attempt is signed
// anew (t= of the attempt), the payload byte-identical. Nothing is given
// up silently: see WebhookStats.

// WebhookEvent is an event the server emitted, sent or not.
type WebhookEvent struct {
	ID   string // "evt_..."
	Type string // "payment_intent.succeeded", "refund.created", ...
	// PaymentID is the PaymentIntent's id, or the refunded one's for an
	// event about a refund; PurchaseID the purchase its metadata names.
	PaymentID  string
	PurchaseID string
	// RefundID is the provider's refund id ("re_…") for an event about a
	// refund (refund.*, charge.refunded), else "".
	RefundID string
	// Status is the status in the payload: the PaymentIntent's, or the
	// refund's for an event about a refund (charge.refunded included).
	Status  string
	Created time.Time
	// Payload is the exact body POSTed, every copy and attempt alike.
	Payload []byte
	// Faults are the faults the event got, in WebhookFaults' draw order.
	Faults []WebhookFault
}

// Has reports whether e got fault f.
func (e WebhookEvent) Has(f WebhookFault) bool { return slices.Contains(e.Faults, f) }

// Delivery is one POST of an event (an attempt of one of its copies).
type Delivery struct {
	EventID   string
	Type      string
	PaymentID string
	RefundID  string // for an event about a refund
	// Copy is 1, or 2 for the second copy of a duplicated event.
	Copy int
	// Attempt counts the copy's POSTs, from 1.
	Attempt int
	// Signature is the Stripe-Signature header sent.
	Signature string
	// StatusCode is the receiver's answer, 0 if none came (Err).
	StatusCode int
	Err        string
	// Acked: the receiver answered 2xx; the copy is delivered.
	Acked bool
	// GaveUp: this was the copy's last attempt and it failed.
	GaveUp bool
}

// WebhookStats counts what became of the events. Every copy to send (one
// per event not dropped, two for a duplicated one) ends acked, failed or
// is still pending: Emitted - Dropped + Duplicated = Acked + Failed +
// Pending.
type WebhookStats struct {
	Emitted    int // events emitted, stale ones included
	Sent       int // POST attempts made, retries included
	Retries    int // attempts after a copy's first
	Acked      int // copies acknowledged with a 2xx
	Failed     int // copies given up after WebhookMaxAttempts attempts
	Pending    int // copies held, queued, in flight, or abandoned at Close
	Dropped    int // events dropped by fault
	Duplicated int // events sent twice by fault
	Reordered  int // events held behind a later one by fault
	Delayed    int // events held until the next Tick by fault
	Stale      int // stale processing events added by fault
}

// SignatureHeader returns the Stripe-Signature header that signs payload
// with secret at t: "t=<unix seconds>,v1=<hex HMAC-SHA256(secret,
// "<t>.<payload>")>", as Stripe computes it.
func SignatureHeader(payload []byte, secret string, t time.Time) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts))
	mac.Write([]byte("."))
	mac.Write(payload)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// Tick emits the events of the changes since the last look at the ledger
// (charges that settled by the Fake's clock, changes made by direct
// Fake.Create, Fake.ChargeOutside and Fake.SetStatus calls) and releases
// the events held by WebhookDelay, after the new ones. With SyncDelivery
// it delivers them before returning; otherwise the background goroutine
// does. Tests call it after moving a
// fake clock; on the real clock the background ticker calls it every
// TickEvery. It does nothing without webhooks or after Close.
func (s *Server) Tick() {
	if s.wh == nil || s.closed() {
		return
	}
	s.wh.scan(true)
	s.afterEmit()
}

// emit looks for new changes after a create, without releasing delayed
// events.
func (s *Server) emit() {
	if s.wh == nil || s.closed() {
		return
	}
	s.wh.scan(false)
	s.afterEmit()
}

func (s *Server) afterEmit() {
	if s.cfg.SyncDelivery {
		s.wh.drainSync()
		return
	}
	select {
	case s.wh.wake <- struct{}{}:
	default:
	}
}

// Events returns the events emitted so far, in emission order, dropped
// ones included.
func (s *Server) Events() []WebhookEvent {
	if s.wh == nil {
		return nil
	}
	w := s.wh
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]WebhookEvent, len(w.events))
	for i, ev := range w.events {
		out[i] = ev.WebhookEvent
		out[i].Payload = slices.Clone(ev.Payload)
		out[i].Faults = slices.Clone(ev.Faults)
	}
	return out
}

// Deliveries returns every POST made so far, in order of completion.
func (s *Server) Deliveries() []Delivery {
	if s.wh == nil {
		return nil
	}
	s.wh.mu.Lock()
	defer s.wh.mu.Unlock()
	return slices.Clone(s.wh.deliveries)
}

// WebhookStats returns the delivery counts so far.
func (s *Server) WebhookStats() WebhookStats {
	if s.wh == nil {
		return WebhookStats{}
	}
	s.wh.mu.Lock()
	defer s.wh.mu.Unlock()
	st := s.wh.stats
	st.Pending = s.wh.pending
	return st
}

// Drain waits until every copy released for delivery has been acked or
// given up, or ctx ends. Events held by WebhookDelay (until the next Tick)
// or WebhookReorder (behind a later event) are not waited for.
func (s *Server) Drain(ctx context.Context) error {
	if s.wh == nil {
		return nil
	}
	w := s.wh
	for {
		w.mu.Lock()
		busy := len(w.queue) + w.inflight
		changed := w.changed
		w.mu.Unlock()
		if busy == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("fakeprovider: drain webhooks: %d deliveries outstanding: %w", busy, ctx.Err())
		case <-s.closing:
			return fmt.Errorf("fakeprovider: drain webhooks: server closed with %d deliveries outstanding", busy)
		}
	}
}

// webhooks is the webhook half of a Server.
type webhooks struct {
	s *Server

	deliverMu sync.Mutex // SyncDelivery: one goroutine delivers at a time
	wake      chan struct{}

	log        *changeLog // the Fake's changes to announce; guarded by Fake.mu
	mu         sync.Mutex // guards the rest; taken before Fake.mu
	rngs       map[string]*rand.Rand
	nextID     int
	events     []*event
	delayed    []*event                  // until the next Tick
	reordered  map[string][]*event       // by PaymentIntent, until its next event
	scripts    map[string][]WebhookFault // by purchase, see ScriptWebhooks
	refundRNGs map[string]*rand.Rand
	// refundScripts are by refund, see ScriptRefundWebhooks.
	refundScripts map[string][]WebhookFault
	queue         []*outCopy
	seq           int64
	inflight      int
	pending       int // copies not yet acked or failed
	deliveries    []Delivery
	stats         WebhookStats
	changed       chan struct{} // closed and replaced at each delivery
}

type event struct {
	WebhookEvent
	copies    int      // copies to send: 0 (dropped), 1 or 2
	followers []*event // released right after it
}

// outCopy is one copy of an event to deliver.
type outCopy struct {
	ev       *event
	n        int // 1 or 2
	attempts int
	due      time.Time // zero: now
	seq      int64     // FIFO among copies due together
}

func newWebhooks(s *Server) *webhooks {
	return &webhooks{
		s:         s,
		wake:      make(chan struct{}, 1),
		log:       s.fake.watch(),
		rngs:      make(map[string]*rand.Rand),
		reordered: make(map[string][]*event),
		scripts:   make(map[string][]WebhookFault),
		changed:   make(chan struct{}),

		refundRNGs:    make(map[string]*rand.Rand),
		refundScripts: make(map[string][]WebhookFault),
	}
}

// scan emits the events of the ledger's changes, then, with
// releaseDelayed, the events held until this Tick.
func (w *webhooks) scan(releaseDelayed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var held []*event
	if releaseDelayed {
		held, w.delayed = w.delayed, nil
	}
	for _, ch := range w.changes() {
		if !ch.silent {
			w.emit(ch)
		}
	}
	for _, ev := range held {
		w.release(ev)
	}
}

// changes settles the charges whose time has come and returns the
// ledger's changes logged since the last call, in the order they were
// made. Call with w.mu held.
func (w *webhooks) changes() []change {
	f := w.s.fake
	f.mu.Lock()
	defer f.mu.Unlock()
	f.settleDue(f.cfg.Now())
	out := w.log.changes
	w.log.changes = nil
	return out
}

// emit makes the events of ch, draws their faults and releases or holds
// them. Call with w.mu held.
func (w *webhooks) emit(ch change) {
	if ch.r != nil {
		w.emitRefund(ch)
		return
	}
	// An outside charge's events take none of the purchase's scripts.
	u, scripted := w.draw(w.scripts, ch.c.PurchaseID, !ch.c.Outside, func() *rand.Rand { return w.rng(ch.c) })
	ev := w.newPIEvent(ch.c, ch.status, ch.at, ch.created)
	final := ch.status != StatusProcessing && ch.status != StatusRequiresAction
	w.send(ev, ch.c.ID, final, u, scripted, func() *event {
		return w.newPIEvent(ch.c, StatusProcessing, ch.c.CreatedAt, true)
	})
}

// emitRefund makes the events of a refund's change (see the table above),
// each with its own draws from the refund's source, and its own scripted
// fault. Call with w.mu held.
func (w *webhooks) emitRefund(ch change) {
	r := *ch.r
	final := ch.status != RefundStatusPending && ch.status != RefundStatusRequiresAction
	for _, typ := range refundEventTypes(ch.status, ch.created) {
		// An outside refund's events take none of the refund scripts.
		u, scripted := w.draw(w.refundScripts, r.RefundID, !r.Outside && r.RefundID != "", func() *rand.Rand { return w.refundRNG(r) })
		ev := w.newRefundEvent(typ, ch, ch.status, ch.at, ch.created)
		var stale func() *event
		if typ != chargeRefunded {
			stale = func() *event { return w.newRefundEvent("refund.updated", ch, RefundStatusPending, r.CreatedAt, false) }
		}
		w.send(ev, r.ID, final, u, scripted, stale)
	}
}

// draw takes an event's draws, one per fault in webhookFaultOrder, from
// the source rng returns (all 1, no fault, when no fault has a
// probability), and, when script is set, the next scripted fault of key
// in scripts. Call with w.mu held.
func (w *webhooks) draw(scripts map[string][]WebhookFault, key string, script bool, rng func() *rand.Rand) ([5]float64, WebhookFault) {
	var u [5]float64
	for i := range u {
		u[i] = 1 // no fault
	}
	if w.s.cfg.WebhookFaults.any() {
		r := rng()
		for i := range u {
			u[i] = r.Float64()
		}
	}
	// A scripted fault for the next event wins over the draw; the draw is
	// still taken, so the faults that follow stay the same.
	var scripted WebhookFault
	if q := scripts[key]; len(q) > 0 && script {
		scripted, scripts[key] = q[0], q[1:]
	}
	return u, scripted
}

// send gives ev, just made, the faults its draws u (or scripted) decide,
// and releases or holds it. holdKey names the object whose next event
// releases ev when it is reordered (a PaymentIntent's id, a refund's);
// final tells whether ev reports a final status, the only ones that get a
// stale follower, made by stale (nil: none) and the only ones never
// reordered. Call with w.mu held.
func (w *webhooks) send(ev *event, holdKey string, final bool, u [5]float64, scripted WebhookFault, stale func() *event) {
	p := w.s.cfg.WebhookFaults
	has := func(f WebhookFault, i int, prob float64) bool { return scripted == f || u[i] < prob }
	ev.followers, ev.copies = w.reordered[holdKey], 1
	delete(w.reordered, holdKey)
	if final && stale != nil && has(WebhookStaleProcessing, 4, p.StaleProcessing) {
		st := stale()
		st.Faults = []WebhookFault{WebhookStaleProcessing}
		st.copies = 1
		w.pending++
		w.stats.Stale++
		ev.followers = append(ev.followers, st)
	}
	if has(WebhookDrop, 0, p.Drop) {
		ev.copies = 0
		ev.Faults = append(ev.Faults, WebhookDrop)
		w.stats.Dropped++
		w.release(ev) // its followers go now
		return
	}
	if has(WebhookDuplicate, 1, p.Duplicate) {
		ev.copies = 2
		ev.Faults = append(ev.Faults, WebhookDuplicate)
		w.stats.Duplicated++
	}
	w.pending += ev.copies
	switch {
	case !final && has(WebhookReorder, 2, p.Reorder):
		ev.Faults = append(ev.Faults, WebhookReorder)
		w.stats.Reordered++
		w.reordered[holdKey] = append(w.reordered[holdKey], ev)
	case has(WebhookDelay, 3, p.Delay):
		ev.Faults = append(ev.Faults, WebhookDelay)
		w.stats.Delayed++
		w.delayed = append(w.delayed, ev)
	default:
		w.release(ev)
	}
}

// ScriptWebhooks gives the next webhook events of purchaseID these faults,
// one per event in order; after them, events get the configured
// probabilities again. Deterministic whatever the interleaving. The events
// of an outside charge (ChargeOutside) for purchaseID take none of them,
// nor do the events of its refunds (see ScriptRefundWebhooks).
func (s *Server) ScriptWebhooks(purchaseID string, faults ...WebhookFault) {
	w := s.wh
	if w == nil {
		return // webhooks are off
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.scripts[purchaseID] = append(w.scripts[purchaseID], faults...)
}

// ScriptRefundWebhooks gives the next webhook events of the refund
// refundID (payrecon's id, the refund's metadata refund_id) these faults,
// one per event in order (a refund's change may make two events:
// refund.created then charge.refunded, for one), as ScriptWebhooks does
// for a purchase. The events of an outside refund (RefundOutside) take
// none of them.
func (s *Server) ScriptRefundWebhooks(refundID string, faults ...WebhookFault) {
	w := s.wh
	if w == nil {
		return // webhooks are off
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.refundScripts[refundID] = append(w.refundScripts[refundID], faults...)
}

// webhookSalt separates the webhook draws from the create draws of the
// same seed and purchase.
const webhookSalt = 0x77656268_6f6f6b73 // "webhooks"

// rng returns the fault source of c's purchase, or of c itself for a
// charge with no purchase id or made outside (whose events must not shift
// the purchase's draws). Call with w.mu held.
func (w *webhooks) rng(c Charge) *rand.Rand {
	key := c.PurchaseID
	if key == "" || c.Outside {
		key = w.s.fake.localID(c.ID) // the same draws in every fake
	}
	return w.source(w.rngs, key, webhookSalt)
}

// refundRNG returns the fault source of r's events: of payrecon's refund
// id in its metadata, or of r itself for a refund with none or made
// outside. Its draws are apart from the purchase's. Call with w.mu held.
func (w *webhooks) refundRNG(r Refund) *rand.Rand {
	key := r.RefundID
	if key == "" || r.Outside {
		key = w.s.fake.localID(r.ID) // the same draws in every fake
	}
	return w.source(w.refundRNGs, key, webhookSalt^refundSalt)
}

// source returns the source of key in rngs, seeded by the Fake's seed,
// key and salt. Call with w.mu held.
func (w *webhooks) source(rngs map[string]*rand.Rand, key string, salt uint64) *rand.Rand {
	r := rngs[key]
	if r == nil {
		h := fnv.New64a()
		h.Write([]byte(key))
		r = rand.New(rand.NewPCG(uint64(w.s.fake.cfg.Seed), h.Sum64()^salt))
		rngs[key] = r
	}
	return r
}

// chargeRefunded is the type of the event announcing a refund of a
// charge, whose object is the charge.
const chargeRefunded = "charge.refunded"

// refundEventTypes are the types of the events of a refund's change to
// status (its creation when created), in order:
//
//	created                            refund.created
//	created failed                     refund.created, refund.failed
//	created succeeded                  refund.created, charge.refunded
//	settles or moves to succeeded      refund.updated, charge.refunded
//	settles or moves to failed         refund.failed
//	moves to any other status          refund.updated
func refundEventTypes(status string, created bool) []string {
	var types []string
	switch {
	case created:
		types = append(types, "refund.created")
		if status == RefundStatusFailed {
			types = append(types, "refund.failed")
		}
	case status == RefundStatusFailed:
		types = append(types, "refund.failed")
	default:
		types = append(types, "refund.updated")
	}
	if status == RefundStatusSucceeded {
		types = append(types, chargeRefunded)
	}
	return types
}

// newPIEvent records the event of c in status. Call with w.mu held.
func (w *webhooks) newPIEvent(c Charge, status string, at time.Time, withKey bool) *event {
	key := ""
	if withKey {
		key = c.IdempotencyKey
	}
	return w.newEvent(WebhookEvent{
		Type:       eventType(status),
		PaymentID:  c.ID,
		PurchaseID: c.PurchaseID,
		Status:     status,
		Created:    at,
	}, renderPI(c, status), key)
}

// newRefundEvent records the event of type typ of ch's refund in status:
// the refund's object, or for charge.refunded its payment's charge with
// its refunds. Call with w.mu held.
func (w *webhooks) newRefundEvent(typ string, ch change, status string, at time.Time, withKey bool) *event {
	r := *ch.r
	var object any = renderRefund(r, status)
	if typ == chargeRefunded {
		object = renderCharge(ch.c, ch.refunds)
	}
	key := ""
	if withKey {
		key = r.IdempotencyKey
	}
	return w.newEvent(WebhookEvent{
		Type:       typ,
		PaymentID:  r.PaymentID,
		PurchaseID: r.PurchaseID,
		RefundID:   r.ID,
		Status:     status,
		Created:    at,
	}, object, key)
}

// newEvent records the event ev (its ID and Payload to fill) whose object
// is object, carrying the idempotency key key (none when ""). Call with
// w.mu held.
func (w *webhooks) newEvent(info WebhookEvent, object any, key string) *event {
	w.nextID++
	w.stats.Emitted++
	info.ID = w.s.fake.newID("evt_", w.nextID)
	ev := &event{WebhookEvent: info}
	body := stripeEvent{
		ID:              ev.ID,
		Object:          "event",
		APIVersion:      APIVersion,
		Created:         info.Created.Unix(),
		Livemode:        false,
		PendingWebhooks: 1,
		Type:            ev.Type,
	}
	body.Data.Object = object
	if key != "" {
		body.Request.IdempotencyKey = &key
	}
	b, err := json.Marshal(body)
	if err != nil { // plain structs: cannot fail
		panic(fmt.Sprintf("fakeprovider: marshal event: %v", err))
	}
	ev.Payload = b
	w.events = append(w.events, ev)
	return ev
}

// eventType is the type of the event announcing a PaymentIntent's status.
func eventType(status string) string {
	switch status {
	case StatusRequiresPaymentMethod:
		return "payment_intent.payment_failed"
	case StatusSucceeded, StatusProcessing, StatusCanceled, StatusRequiresAction:
		return "payment_intent." + status
	}
	return "payment_intent.updated"
}

// stripeEvent is an Event as Stripe sends it to a webhook endpoint.
type stripeEvent struct {
	ID         string `json:"id"`
	Object     string `json:"object"`
	APIVersion string `json:"api_version"`
	Created    int64  `json:"created"`
	Data       struct {
		Object any `json:"object"`
	} `json:"data"`
	Livemode        bool `json:"livemode"`
	PendingWebhooks int  `json:"pending_webhooks"`
	Request         struct {
		ID             *string `json:"id"`
		IdempotencyKey *string `json:"idempotency_key"`
	} `json:"request"`
	Type string `json:"type"`
}

// release queues ev's copies, then its followers. Call with w.mu held.
func (w *webhooks) release(ev *event) {
	for n := 1; n <= ev.copies; n++ {
		w.seq++
		w.queue = append(w.queue, &outCopy{ev: ev, n: n, seq: w.seq})
	}
	followers := ev.followers
	ev.followers = nil
	for _, f := range followers {
		w.release(f)
	}
}

// next takes the copy to deliver first, if one is due at now; otherwise it
// returns how long until one is, or -1 if none is queued. Call with w.mu
// held.
func (w *webhooks) next(now time.Time) (*outCopy, time.Duration) {
	best := -1
	for i, c := range w.queue {
		if best < 0 || c.due.Before(w.queue[best].due) || (c.due.Equal(w.queue[best].due) && c.seq < w.queue[best].seq) {
			best = i
		}
	}
	if best < 0 {
		return nil, -1
	}
	c := w.queue[best]
	if wait := c.due.Sub(now); !c.due.IsZero() && wait > 0 {
		return nil, wait
	}
	w.queue = slices.Delete(w.queue, best, best+1)
	w.inflight++
	return c, 0
}

// maxAnswer bounds how much of a receiver's answer is read.
const maxAnswer = 64 << 10

// attempt POSTs c once and records the result: acked, rescheduled after
// its backoff, or given up.
func (w *webhooks) attempt(c *outCopy) {
	s := w.s
	c.attempts++
	header := SignatureHeader(c.ev.Payload, s.cfg.WebhookSecret, s.now())
	d := Delivery{EventID: c.ev.ID, Type: c.ev.Type, PaymentID: c.ev.PaymentID, RefundID: c.ev.RefundID, Copy: c.n, Attempt: c.attempts, Signature: header}
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, s.cfg.WebhookURL, bytes.NewReader(c.ev.Payload))
	if err == nil {
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		req.Header.Set("Stripe-Signature", header)
		req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
		var resp *http.Response
		resp, err = s.cfg.WebhookClient.Do(req)
		if err == nil {
			d.StatusCode = resp.StatusCode
			io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
			resp.Body.Close()
		}
	}
	if err != nil {
		d.Err = err.Error()
	}
	d.Acked = err == nil && d.StatusCode >= 200 && d.StatusCode < 300

	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight--
	w.stats.Sent++
	if c.attempts > 1 {
		w.stats.Retries++
	}
	attrs := []any{"event", d.EventID, "type", d.Type, "payment_intent", d.PaymentID, "refund", d.RefundID, "copy", d.Copy, "attempt", d.Attempt, "status", d.StatusCode, "error", d.Err}
	switch {
	case d.Acked:
		w.stats.Acked++
		w.pending--
	case s.closed():
		// Abandoned: it stays pending.
		s.log.Warn("fakeprovider: webhook delivery abandoned at close", attrs...)
	case c.attempts >= s.cfg.WebhookMaxAttempts:
		d.GaveUp = true
		w.stats.Failed++
		w.pending--
		s.log.Error("fakeprovider: webhook delivery failed, giving up", attrs...)
	default:
		c.due = time.Now().Add(w.backoff(c.attempts))
		w.queue = append(w.queue, c)
		s.log.Info("fakeprovider: webhook delivery failed, will retry", attrs...)
	}
	w.deliveries = append(w.deliveries, d)
	close(w.changed)
	w.changed = make(chan struct{})
}

// backoff is the wait after a copy's attempts-th failed attempt.
func (w *webhooks) backoff(attempts int) time.Duration {
	d, limit := w.s.cfg.WebhookBackoff, w.s.cfg.WebhookMaxBackoff
	for i := 1; i < attempts && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// drainSync delivers everything queued, waiting out retries' backoffs,
// unless another goroutine is delivering (it then delivers these too).
func (w *webhooks) drainSync() {
	if !w.deliverMu.TryLock() {
		return
	}
	defer w.deliverMu.Unlock()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for !w.s.closed() {
		w.mu.Lock()
		c, wait := w.next(time.Now())
		w.mu.Unlock()
		switch {
		case c != nil:
			w.attempt(c)
			continue
		case wait < 0:
			return
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-w.s.closing:
		}
	}
}

// deliverLoop delivers in the background until Close.
func (s *Server) deliverLoop() {
	defer s.wg.Done()
	w := s.wh
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for !s.closed() {
		w.mu.Lock()
		c, wait := w.next(time.Now())
		w.mu.Unlock()
		if c != nil {
			w.attempt(c)
			continue
		}
		var due <-chan time.Time
		if wait >= 0 {
			timer.Reset(wait)
			due = timer.C
		}
		select {
		case <-s.closing:
		case <-w.wake:
		case <-due:
		}
		timer.Stop()
	}
}

// tickLoop calls Tick every TickEvery until Close.
func (s *Server) tickLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.TickEvery)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C:
			s.Tick()
		}
	}
}
