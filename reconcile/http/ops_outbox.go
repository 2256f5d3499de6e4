package http

import (
	"crypto/hmac"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// The outbox page: the deliveries that died after their retry window (or
// were refused for good), with the replay action. Nothing the relay gives
// up on is dropped: it waits here.

// opsOutboxLimit caps the dead deliveries the page lists.
const opsOutboxLimit = 500

type opsOutboxData struct {
	opsBase
	Flash  *opsFlash
	Stats  reconcile.OutboxStats
	Oldest string // age of the oldest pending delivery, or ""
	Dead   []reconcile.Delivery
	Capped bool
	Subs   []string // subscriptions with dead deliveries, for the replay form
	Now    time.Time
}

// outboxPage shows the outbox's counts and its dead deliveries.
func (o *Ops) outboxPage(w http.ResponseWriter, r *http.Request, who opsWho) {
	dead, stats, err := o.svc.DeadDeliveries(r.Context(), opsOutboxLimit)
	if err != nil {
		o.log.Error("ops: dead deliveries", "err", err)
		o.renderError(w, r, who, statusOf(reconcile.KindInternal), "Could not read the outbox", "The outbox could not be read from the database. Reload to try again.")
		return
	}
	var flash *opsFlash
	q := r.URL.Query()
	if msg := q.Get("flash"); msg != "" && hmac.Equal([]byte(q.Get("fs")), []byte(o.flashSig("outbox", msg))) {
		flash = &opsFlash{Text: msg}
	}
	data := opsOutboxData{opsBase: o.base("Outbox", who), Flash: flash, Stats: stats, Dead: dead, Capped: len(dead) == opsOutboxLimit, Now: o.cfg.Now().UTC()}
	if !stats.Oldest.IsZero() {
		data.Oldest = opsAge(data.Now.Sub(stats.Oldest))
	}
	seen := map[string]bool{}
	for _, d := range dead {
		if !seen[d.Subscription.Name] {
			seen[d.Subscription.Name] = true
			data.Subs = append(data.Subs, d.Subscription.Name)
		}
	}
	o.render(w, http.StatusOK, "outbox", data)
}

// replayOutbox makes the dead deliveries pending again (of one
// subscription, or of all), for the relay to send with the same ids and
// bytes.
func (o *Ops) replayOutbox(w http.ResponseWriter, r *http.Request, who opsWho) {
	sub := r.PostForm.Get("subscription")
	n, err := o.svc.ReplayEvents(r.Context(), reconcile.Replay{Subscription: sub, DeadOnly: true})
	if err != nil {
		k := reconcile.KindOf(err)
		msg := "Not done: " + errDetail(err)
		if k != reconcile.KindNotFound {
			o.log.Error("ops: replay outbox", "subscription", sub, "operator", who.Operator, "err", err)
			k, msg = reconcile.KindInternal, "Not done: an internal error stopped the replay. Nothing was changed; reload the page and try again."
		}
		if opsWantsJSON(r) {
			writeError(w, statusOf(k), codeOf(k), msg)
			return
		}
		o.renderError(w, r, who, statusOf(k), "Replay refused", msg)
		return
	}
	target := "every subscription"
	if sub != "" {
		target = "subscription " + sub
	}
	o.log.Info("ops: replayed dead outbox deliveries", "subscription", sub, "operator", who.Operator, "deliveries", n)
	msg := fmt.Sprintf("%d dead deliveries to %s are pending again; the relay sends them in order, with their ids and bytes.", n, target)
	if opsWantsJSON(r) {
		writeJSON(w, http.StatusOK, map[string]any{"message": msg, "replayed": n})
		return
	}
	q := url.Values{"flash": {msg}, "fs": {o.flashSig("outbox", msg)}}
	http.Redirect(w, r, "/ops/outbox?"+q.Encode(), http.StatusSeeOther)
}
