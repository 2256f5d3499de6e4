package http

import (
	"crypto/hmac"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/payrecon/payrecon/reconcile"
)

// The outbox page: each subscription's health (healthy, failing, dead),
// counts, oldest pending age, last error and next attempt, with the
// replay action; and the deliveries that died after their retry window
// (or were refused for good). Nothing the relay gives up on is dropped:
// it waits here.

// opsOutboxLimit caps the dead deliveries the page lists.
const opsOutboxLimit = 500

type opsOutboxData struct {
	opsBase
	Flash  *opsFlash
	Stats  reconcile.OutboxStats
	Oldest string // age of the oldest pending delivery, or ""
	Subs   []opsSubscription
	Dead   []reconcile.Delivery
	Capped bool
	Now    time.Time
}

// opsSubscription is a subscription's row on the outbox page.
type opsSubscription struct {
	reconcile.SubscriptionOutbox
	Health reconcile.SubscriptionHealth
	Oldest string // age of its oldest pending delivery, or ""
	Next   string // when its next attempt is due, from now ("due" once past), or ""
}

// opsSubscriptionJSON is a subscription in the outbox page's JSON.
type opsSubscriptionJSON struct {
	Name                    string                       `json:"name"`
	URL                     string                       `json:"url"`
	Health                  reconcile.SubscriptionHealth `json:"health"`
	Pending                 int                          `json:"pending"`
	Dead                    int                          `json:"dead"`
	OldestPendingAgeSeconds float64                      `json:"oldest_pending_age_seconds"`
	NextAttemptAt           *time.Time                   `json:"next_attempt_at"`
	LastError               string                       `json:"last_error"`
}

// outboxPage shows the outbox's counts, its subscriptions and its dead
// deliveries; as JSON for scripts.
func (o *Ops) outboxPage(w http.ResponseWriter, r *http.Request, who opsWho) {
	v, err := o.svc.Outbox(r.Context(), opsOutboxLimit)
	if err != nil {
		o.log.Error("ops: outbox", "err", err)
		o.renderError(w, r, who, statusOf(reconcile.KindInternal), "Could not read the outbox", "The outbox could not be read from the database. Reload to try again.")
		return
	}
	now := o.cfg.Now().UTC()
	if opsWantsJSON(r) {
		subs := []opsSubscriptionJSON{}
		for _, s := range v.Subscriptions {
			j := opsSubscriptionJSON{Name: s.Name, URL: s.URL, Health: s.Health(), Pending: s.Pending, Dead: s.Dead, LastError: s.LastError}
			if !s.Oldest.IsZero() {
				j.OldestPendingAgeSeconds = now.Sub(s.Oldest).Seconds()
			}
			if !s.NextAttempt.IsZero() {
				j.NextAttemptAt = &s.NextAttempt
			}
			subs = append(subs, j)
		}
		dead := []map[string]any{}
		for _, d := range v.Dead {
			dead = append(dead, map[string]any{"subscription": d.Subscription.Name, "event_id": d.EventID, "type": d.Type, "purchase_id": d.PurchaseID,
				"sequence": d.Sequence, "attempts": d.Attempts, "last_error": d.LastError, "created_at": d.CreatedAt})
		}
		writeJSON(w, http.StatusOK, map[string]any{"pending": v.Stats.Pending, "dead": v.Stats.Dead, "subscriptions": subs, "dead_deliveries": dead})
		return
	}
	var flash *opsFlash
	q := r.URL.Query()
	if msg := q.Get("flash"); msg != "" && hmac.Equal([]byte(q.Get("fs")), []byte(o.flashSig("outbox", msg))) {
		flash = &opsFlash{Text: msg}
	}
	data := opsOutboxData{opsBase: o.base("Outbox", who), Flash: flash, Stats: v.Stats, Dead: v.Dead, Capped: len(v.Dead) == opsOutboxLimit, Now: now}
	if !v.Stats.Oldest.IsZero() {
		data.Oldest = opsAge(now.Sub(v.Stats.Oldest))
	}
	for _, s := range v.Subscriptions {
		row := opsSubscription{SubscriptionOutbox: s, Health: s.Health()}
		if !s.Oldest.IsZero() {
			row.Oldest = opsAge(now.Sub(s.Oldest))
		}
		switch {
		case s.NextAttempt.IsZero():
		case !s.NextAttempt.After(now):
			row.Next = "due"
		default:
			row.Next = "in " + opsAge(s.NextAttempt.Sub(now))
		}
		data.Subs = append(data.Subs, row)
	}
	o.render(w, http.StatusOK, "outbox", data)
}

// refuseAction answers an operator action that failed with err: what
// was not found is said as it is; anything else is logged with the
// action's name and args (key, value pairs) and answered as an internal
// error that changed nothing.
func (o *Ops) refuseAction(w http.ResponseWriter, r *http.Request, who opsWho, err error, action string, args ...any) {
	k := reconcile.KindOf(err)
	msg := "Not done: " + errDetail(err)
	if k != reconcile.KindNotFound {
		o.log.Error("ops: "+action, append(args, "operator", who.Operator, "err", err)...)
		k, msg = reconcile.KindInternal, "Not done: an internal error stopped the "+action+". Nothing was changed; reload the page and try again."
	}
	if opsWantsJSON(r) {
		writeError(w, statusOf(k), codeOf(k), msg)
		return
	}
	o.renderError(w, r, who, statusOf(k), strings.ToUpper(action[:1])+action[1:]+" refused", msg)
}

// replayOutbox makes the dead deliveries pending again (of one
// subscription, or of all), for the relay to send with the same ids and
// bytes.
func (o *Ops) replayOutbox(w http.ResponseWriter, r *http.Request, who opsWho) {
	sub := r.PostForm.Get("subscription")
	n, err := o.svc.ReplayEvents(r.Context(), reconcile.Replay{Subscription: sub, DeadOnly: true})
	if err != nil {
		o.refuseAction(w, r, who, err, "replay", "subscription", sub)
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
