package fakeprovider

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
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
// and every change of a dispute (see Fake.OpenDispute, Fake.MoveDispute),
// each event carrying the Dispute as it is after the change, each created
// a second after the dispute's previous event at least:
//
//	chargeback opened                        charge.dispute.created,
//	                                         charge.dispute.funds_withdrawn
//	inquiry opened                           charge.dispute.created
//	inquiry escalates to needs_response      charge.dispute.updated,
//	                                         charge.dispute.funds_withdrawn
//	moves to another open status             charge.dispute.updated
//	won                                      charge.dispute.closed,
//	                                         charge.dispute.funds_reinstated
//	lost, warning_closed or prevented        charge.dispute.closed
//
// Each webhook is a copy of its event in the Fake's event log (events.go),
// same id and payload; only a stale follower (WebhookStaleProcessing) is
// not in the log, being no change of the ledger.
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
// it. Refunds and disputes are announced alike (RefundOutside,
// SetRefundStatus, OpenDispute, MoveDispute and their Server forms). A
// charge's or refund's creation event carries the request's idempotency
// key (request.idempotency_key); a settlement, a move or a dispute's event
// carries none, like Stripe's automatic events, and a settlement is
// created at the charge's SettlesAt, a move when it was made.
// request.id is always null.
//
// Delivery is Stripe's: a copy of an event is retried, with backoff, until
// a 2xx answer or WebhookMaxAttempts attempts; each attempt is signed
// anew (t= of the attempt), the payload byte-identical. Nothing is given
// up silently: see WebhookStats.

// WebhookEvent is an event the server emitted, sent or not.
type WebhookEvent struct {
	ID   string // "evt_..."
	Type string // "payment_intent.succeeded", "refund.created", ...
	// Account is the connected account the event happened in (the fake
	// of Fake.Account), rendered as Stripe's top-level account; "" for
	// the platform's.
	Account string
	// PaymentID is the PaymentIntent's id, or the refunded (disputed)
	// one's for an event about a refund (a dispute); PurchaseID the
	// purchase its metadata names.
	PaymentID  string
	PurchaseID string
	// RefundID is the provider's refund id ("re_…") for an event about a
	// refund (refund.*, charge.refunded), else "".
	RefundID string
	// DisputeID is the provider's dispute id ("du_…") for an event about
	// a dispute (charge.dispute.*), else "".
	DisputeID string
	// Status is the status in the payload: the PaymentIntent's, the
	// refund's for an event about a refund (charge.refunded included),
	// the dispute's for one about a dispute.
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
	DisputeID string // for an event about a dispute
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
// TickEvery. It does nothing without webhooks or after Close. It then
// ticks the connected accounts' Servers (Account), by account.
func (s *Server) Tick() {
	if s.closed() {
		return
	}
	if s.wh != nil {
		s.wh.scan(true)
		s.afterEmit()
	}
	for _, sub := range s.accountServers() {
		sub.Tick()
	}
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

// Events returns the events s emitted so far, in emission order, dropped
// ones included: the platform's for the platform's Server, a connected
// account's for its Server (Account).
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

// Deliveries returns every POST s made so far, in order of completion:
// the platform's or an account's, as Events.
func (s *Server) Deliveries() []Delivery {
	if s.wh == nil {
		return nil
	}
	s.wh.mu.Lock()
	defer s.wh.mu.Unlock()
	return slices.Clone(s.wh.deliveries)
}

// WebhookStats returns s's delivery counts so far: the platform's or an
// account's, as Events.
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
// given up, or ctx ends: the platform's, then the connected accounts'
// (Account). Events held by WebhookDelay (until the next Tick) or
// WebhookReorder (behind a later event) are not waited for.
func (s *Server) Drain(ctx context.Context) error {
	if err := s.drain(ctx); err != nil {
		return err
	}
	for _, sub := range s.accountServers() {
		if err := sub.drain(ctx); err != nil {
			return fmt.Errorf("%w (account %s)", err, sub.fake.account)
		}
	}
	return nil
}

// drain is Drain of s's own deliveries.
func (s *Server) drain(ctx context.Context) error {
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
	events     []*event
	delayed    []*event                  // until the next Tick
	reordered  map[string][]*event       // by PaymentIntent, until its next event
	scripts    map[string][]WebhookFault // by purchase, see ScriptWebhooks
	refundRNGs map[string]*rand.Rand
	// disputeRNGs are by dispute, see emitDispute.
	disputeRNGs map[string]*rand.Rand
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
		disputeRNGs:   make(map[string]*rand.Rand),
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
	if ch.dispute != "" {
		w.emitDispute(ch)
		return
	}
	// An outside charge's events take none of the purchase's scripts.
	u, scripted := w.draw(w.scripts, ch.c.PurchaseID, !ch.c.Outside, func() *rand.Rand { return w.rng(ch.c) })
	ev := w.adopt(ch.events[0])
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
	for _, logged := range ch.events {
		typ := logged.Type
		// An outside refund's events take none of the refund scripts.
		u, scripted := w.draw(w.refundScripts, r.RefundID, !r.Outside && r.RefundID != "", func() *rand.Rand { return w.refundRNG(r) })
		ev := w.adopt(logged)
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
