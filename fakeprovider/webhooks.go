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
// it. A charge's creation event carries the request's idempotency key
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
	ID         string // "evt_..."
	Type       string // "payment_intent.succeeded", ...
	PaymentID  string
	PurchaseID string
	// Status is the PaymentIntent's status in the payload.
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
	queue      []*outCopy
	seq        int64
	inflight   int
	pending    int // copies not yet acked or failed
	deliveries []Delivery
	stats      WebhookStats
	changed    chan struct{} // closed and replaced at each delivery
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

// emit makes the event of ch, draws its faults and releases or holds it.
// Call with w.mu held.
func (w *webhooks) emit(ch change) {
	var u [5]float64
	for i := range u {
		u[i] = 1 // no fault
	}
	p := w.s.cfg.WebhookFaults
	if p.any() {
		r := w.rng(ch.c)
		for i := range u {
			u[i] = r.Float64()
		}
	}
	// A scripted fault for the purchase's next event wins over the draw;
	// the draw is still taken, so the faults that follow stay the same.
	// An outside charge's events take none of the purchase's scripts.
	var scripted WebhookFault
	if q := w.scripts[ch.c.PurchaseID]; len(q) > 0 && !ch.c.Outside {
		scripted, w.scripts[ch.c.PurchaseID] = q[0], q[1:]
	}
	has := func(f WebhookFault, i int, prob float64) bool { return scripted == f || u[i] < prob }
	ev := w.newEvent(ch.c, ch.status, ch.at, ch.created)
	pi := ch.c.ID
	ev.followers, ev.copies = w.reordered[pi], 1
	delete(w.reordered, pi)
	final := ch.status != StatusProcessing && ch.status != StatusRequiresAction
	if final && has(WebhookStaleProcessing, 4, p.StaleProcessing) {
		stale := w.newEvent(ch.c, StatusProcessing, ch.c.CreatedAt, true)
		stale.Faults = []WebhookFault{WebhookStaleProcessing}
		stale.copies = 1
		w.pending++
		w.stats.Stale++
		ev.followers = append(ev.followers, stale)
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
		w.reordered[pi] = append(w.reordered[pi], ev)
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
// of an outside charge (ChargeOutside) for purchaseID take none of them.
func (s *Server) ScriptWebhooks(purchaseID string, faults ...WebhookFault) {
	w := s.wh
	if w == nil {
		return // webhooks are off
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.scripts[purchaseID] = append(w.scripts[purchaseID], faults...)
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
		key = w.s.fake.localPaymentID(c.ID) // the same draws in every fake
	}
	r := w.rngs[key]
	if r == nil {
		h := fnv.New64a()
		h.Write([]byte(key))
		r = rand.New(rand.NewPCG(uint64(w.s.fake.cfg.Seed), h.Sum64()^webhookSalt))
		w.rngs[key] = r
	}
	return r
}

// newEvent records the event of c in status. Call with w.mu held.
func (w *webhooks) newEvent(c Charge, status string, at time.Time, withKey bool) *event {
	w.nextID++
	w.stats.Emitted++
	ev := &event{WebhookEvent: WebhookEvent{
		ID:         w.s.fake.newID("evt_", w.nextID),
		Type:       eventType(status),
		PaymentID:  c.ID,
		PurchaseID: c.PurchaseID,
		Status:     status,
		Created:    at,
	}}
	body := stripeEvent{
		ID:              ev.ID,
		Object:          "event",
		APIVersion:      APIVersion,
		Created:         at.Unix(),
		Livemode:        false,
		PendingWebhooks: 1,
		Type:            ev.Type,
	}
	body.Data.Object = renderPI(c, status)
	if withKey && c.IdempotencyKey != "" {
		key := c.IdempotencyKey
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
		Object paymentIntent `json:"object"`
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
	d := Delivery{EventID: c.ev.ID, Type: c.ev.Type, PaymentID: c.ev.PaymentID, Copy: c.n, Attempt: c.attempts, Signature: header}
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
	attrs := []any{"event", d.EventID, "type", d.Type, "payment_intent", d.PaymentID, "copy", d.Copy, "attempt", d.Attempt, "status", d.StatusCode, "error", d.Err}
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
