package sqlstore

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/payrecon/payrecon/events"
	"github.com/payrecon/payrecon/reconcile"
)

// What both stores say alike of the outbox (migrations postgres 00011,
// sqlite 00010).

// OutboxEvent completes e as the outbox stores it, numbered seq in the
// epoch of the latest recovery recorded (recordedAt, zero if none;
// reconcile.EventEpochOf): its schema version (events.SchemaVersion when
// unset), its CreatedAt to the microsecond in UTC (as both stores keep
// times, so that the stored bytes say what the row says), and its wire
// bytes (events.Marshal). An event that does not validate is the store's
// reconcile.ErrInvalid.
func (d Dialect) OutboxEvent(what string, e events.Event, seq int64, recordedAt time.Time) (reconcile.OutboxEvent, error) {
	if e.SchemaVersion == 0 {
		e.SchemaVersion = events.SchemaVersion
	}
	e.Sequence = seq
	e.Epoch = reconcile.EventEpochOf(recordedAt)
	e.CreatedAt = e.CreatedAt.Truncate(time.Microsecond).UTC()
	body, err := events.Marshal(e)
	if err != nil {
		return reconcile.OutboxEvent{}, d.Invalid(what, err.Error())
	}
	return reconcile.OutboxEvent{
		ID: e.ID, PurchaseID: e.PurchaseID, RefundID: e.RefundID, Type: e.Type,
		SchemaVersion: e.SchemaVersion, Sequence: seq, Epoch: e.Epoch, Payload: body, Digest: e.Digest,
		CreatedAt: e.CreatedAt,
	}, nil
}

// PayloadEpoch returns the epoch a stored event's payload carries (0
// when it carries none, or cannot be read).
func PayloadEpoch(payload []byte) int64 {
	var e struct {
		Epoch int64 `json:"epoch"`
	}
	_ = json.Unmarshal(payload, &e)
	return e.Epoch
}

// CheckOutboxEvent refuses, before a sequence number is taken, an event
// AppendOutbox cannot store.
func (d Dialect) CheckOutboxEvent(what string, e events.Event) error {
	switch {
	case e.ID == "":
		return d.Invalid(what, "no event id")
	case e.PurchaseID == "":
		return d.Invalid(what, "no purchase id")
	case e.Type == "":
		return d.Invalid(what, "no type")
	case e.CreatedAt.IsZero():
		return d.Invalid(what, "no created_at")
	}
	return nil
}

// CheckSubscription refuses a subscription without a name, a URL or a
// secret, or with a type that has a comma or a space.
func (d Dialect) CheckSubscription(what string, s reconcile.Subscription) error {
	switch {
	case s.Name == "":
		return d.Invalid(what, "empty name")
	case s.URL == "":
		return d.Invalid(what, "empty url")
	case s.Secret == "":
		return d.Invalid(what, "empty secret")
	}
	for _, t := range s.Types {
		if t == "" || strings.ContainsAny(string(t), ", \t\n") {
			return d.Invalid(what, fmt.Sprintf("event type %q", t))
		}
	}
	return nil
}

// CheckDeliveryOutcome refuses an outcome FinishDelivery cannot record.
func (d Dialect) CheckDeliveryOutcome(what string, state reconcile.DeliveryState, next time.Time) error {
	switch state {
	case reconcile.DeliveryDone, reconcile.DeliveryDead:
		return nil
	case reconcile.DeliveryPending:
		if next.IsZero() {
			return d.Invalid(what, "a retry without its next attempt time")
		}
		return nil
	}
	return d.Invalid(what, fmt.Sprintf("delivery state %q", state))
}

// JoinTypes is a subscription's types as stored: comma-separated, ""
// for every type.
func JoinTypes(ts []events.Type) string {
	ss := make([]string, len(ts))
	for i, t := range ts {
		ss[i] = string(t)
	}
	return strings.Join(ss, ",")
}

// SplitTypes is JoinTypes' inverse.
func SplitTypes(s string) []events.Type {
	if s == "" {
		return nil
	}
	var out []events.Type
	for _, t := range strings.Split(s, ",") {
		out = append(out, events.Type(t))
	}
	return out
}

// LeaseLostDelivery returns the store's reconcile.ErrLeaseLost for the
// outcome of a delivery whose lease is no longer d's.
func (d Dialect) LeaseLostDelivery(dl reconcile.Delivery) error {
	what := fmt.Sprintf("finish delivery of %s to %s (owner %q, token %d)", dl.EventID, dl.Subscription.Name, dl.LeaseOwner, dl.LeaseToken)
	return d.Fail(what, reconcile.KindLeaseLost, "another relay claimed the delivery since, or it was finished or replayed")
}
