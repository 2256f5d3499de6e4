package fakeprovider

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"time"
)

// The webhook events the fake makes of its ledger's changes: scripted
// and drawn faults, and the events' Stripe-shaped bodies.

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

// newPIEvent makes the event of c in status, a stale follower: not in
// the event log. Call with w.mu held.
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

// newRefundEvent makes the event of type typ of ch's refund in status, a
// stale follower: not in the event log. Call with w.mu held.
func (w *webhooks) newRefundEvent(typ string, ch change, status string, at time.Time, withKey bool) *event {
	r := *ch.r
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
	}, renderRefund(r, status), key)
}

// newEvent makes the event info (its ID and Payload to fill) whose
// object is object, carrying the idempotency key key (none when ""), with
// an id of the Fake's event ids but outside its log. Call with w.mu held.
func (w *webhooks) newEvent(info WebhookEvent, object any, key string) *event {
	f := w.s.fake
	f.mu.Lock()
	info.ID = f.nextEventID()
	info.Account = f.account
	f.mu.Unlock()
	obj, err := json.Marshal(object)
	if err != nil { // plain structs: cannot fail
		panic(fmt.Sprintf("fakeprovider: marshal event object: %v", err))
	}
	info.Payload = renderEvent(info, obj, key)
	return w.record(info)
}

// adopt makes the webhook of the logged event l: a copy, same id and
// payload. Call with w.mu held.
func (w *webhooks) adopt(l *loggedEvent) *event {
	info := l.WebhookEvent
	info.Payload = slices.Clone(l.Payload)
	return w.record(info)
}

// record counts the event info, made, among the server's. Call with w.mu
// held.
func (w *webhooks) record(info WebhookEvent) *event {
	w.stats.Emitted++
	ev := &event{WebhookEvent: info}
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
	Account    string `json:"account,omitempty"`
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
