package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/events"
	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
)

// The transactional outbox and its deliveries (migration 00010). Writers
// are serialized (one writer, BEGIN IMMEDIATE), so the sequence counter
// and the claim need no row locks: a transaction that takes a number or
// claims a delivery holds the database until it ends.

const outboxColumns = `event_id, purchase_id, refund_id, event_type, schema_version, sequence, payload, digest, created_at`

// AppendOutbox implements reconcile.Tx under a savepoint of its own, so
// that a refused event leaves neither its sequence number taken nor a
// delivery written, and with it none of the other events of the call.
// Statements run in process here, so it writes the events one by one.
func (t *txn) AppendOutbox(ctx context.Context, es ...events.Event) ([]reconcile.OutboxEvent, error) {
	for _, e := range es {
		if err := dialect.CheckOutboxEvent(fmt.Sprintf("append %s event %s of %s", e.Type, e.ID, e.PurchaseID), e); err != nil {
			return nil, err
		}
	}
	var out []reconcile.OutboxEvent
	err := t.Savepoint(ctx, func(reconcile.Tx) error {
		out = make([]reconcile.OutboxEvent, 0, len(es))
		for _, e := range es {
			ev, err := t.appendOutbox(ctx, e)
			if err != nil {
				return err
			}
			out = append(out, ev)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// appendOutbox writes one event of AppendOutbox, in the epoch of the
// latest recovery recorded (read with its sequence number).
func (t *txn) appendOutbox(ctx context.Context, e events.Event) (reconcile.OutboxEvent, error) {
	what := fmt.Sprintf("append %s event %s of %s", e.Type, e.ID, e.PurchaseID)
	var seq, recorded int64
	if err := t.tx.QueryRowContext(ctx, `INSERT INTO outbox_sequences (purchase_id, last_sequence) VALUES (?1, 1)
ON CONFLICT (purchase_id) DO UPDATE SET last_sequence = outbox_sequences.last_sequence + 1
RETURNING last_sequence, coalesce((SELECT max(recorded_at) FROM recovery_epochs), 0)`, e.PurchaseID).Scan(&seq, &recorded); err != nil {
		return reconcile.OutboxEvent{}, wrap(err, "%s: take its sequence number", what)
	}
	var epochAt time.Time
	if recorded != 0 {
		epochAt = fromMicros(recorded)
	}
	ev, err := dialect.OutboxEvent(what, e, seq, epochAt)
	if err != nil {
		return reconcile.OutboxEvent{}, err
	}
	if _, err := t.exec(ctx, `INSERT INTO outbox (`+outboxColumns+`)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)`,
		ev.ID, ev.PurchaseID, ev.RefundID, string(ev.Type), ev.SchemaVersion, ev.Sequence, ev.Payload, ev.Digest, micros(ev.CreatedAt)); err != nil {
		return reconcile.OutboxEvent{}, wrap(err, "%s", what)
	}
	if _, err := t.exec(ctx, `INSERT INTO outbox_deliveries
    (subscription, event_id, purchase_id, sequence, next_attempt_at, window_from, created_at)
SELECT name, ?1, ?2, ?3, ?4, ?4, ?4 FROM outbox_subscriptions
WHERE event_types = '' OR instr(',' || event_types || ',', ',' || ?5 || ',') > 0`,
		ev.ID, ev.PurchaseID, ev.Sequence, micros(ev.CreatedAt), string(ev.Type)); err != nil {
		return reconcile.OutboxEvent{}, wrap(err, "%s: its deliveries", what)
	}
	return ev, nil
}

// ListOutbox implements reconcile.Tx.
func (t *txn) ListOutbox(ctx context.Context, purchaseID string) ([]reconcile.OutboxEvent, error) {
	return queryAll(ctx, t, scanOutbox, "list outbox of "+purchaseID,
		`SELECT `+outboxColumns+` FROM outbox WHERE purchase_id = ?1 ORDER BY sequence`, purchaseID)
}

func scanOutbox(row sqlstore.Row) (reconcile.OutboxEvent, error) {
	var e reconcile.OutboxEvent
	var typ string
	var created int64
	err := row.Scan(&e.ID, &e.PurchaseID, &e.RefundID, &typ, &e.SchemaVersion, &e.Sequence, &e.Payload, &e.Digest, &created)
	e.Type, e.CreatedAt = events.Type(typ), fromMicros(created)
	e.Epoch = sqlstore.PayloadEpoch(e.Payload)
	return e, err
}

// InsertSubscription implements reconcile.Tx.
func (t *txn) InsertSubscription(ctx context.Context, s reconcile.Subscription) error {
	what := "insert subscription " + s.Name
	if err := dialect.CheckSubscription(what, s); err != nil {
		return err
	}
	if _, err := t.exec(ctx, `INSERT INTO outbox_subscriptions (name, url, secret, event_types, created_at)
VALUES (?1, ?2, ?3, ?4, ?5)`, s.Name, s.URL, s.Secret, sqlstore.JoinTypes(s.Types), micros(storeNow(t.now))); err != nil {
		return wrap(err, "%s", what)
	}
	return nil
}

// ListSubscriptions implements reconcile.Tx.
func (t *txn) ListSubscriptions(ctx context.Context) ([]reconcile.Subscription, error) {
	return queryAll(ctx, t, func(row sqlstore.Row) (reconcile.Subscription, error) {
		var s reconcile.Subscription
		var types string
		var created int64
		err := row.Scan(&s.Name, &s.URL, &s.Secret, &types, &created)
		s.Types, s.CreatedAt = sqlstore.SplitTypes(types), fromMicros(created)
		return s, err
	}, "list subscriptions", `SELECT name, url, secret, event_types, created_at FROM outbox_subscriptions ORDER BY name`)
}

// DeleteSubscription implements reconcile.Tx; its deliveries go with it
// (ON DELETE CASCADE).
func (t *txn) DeleteSubscription(ctx context.Context, name string) error {
	return t.execOne(ctx, "delete subscription "+name, `DELETE FROM outbox_subscriptions WHERE name = ?1`, name)
}

const deliveryColumns = `d.subscription, s.url, s.secret, s.event_types, s.created_at,
    d.event_id, d.purchase_id, d.sequence, o.event_type, o.payload, d.state, d.attempts,
    d.window_from, d.next_attempt_at, d.last_error, d.created_at, d.delivered_at,
    d.lease_owner, d.lease_token, d.lease_expires_at`

const deliveryFrom = `
FROM outbox_deliveries d
JOIN outbox_subscriptions s ON s.name = d.subscription
JOIN outbox o ON o.event_id = d.event_id`

func scanDelivery(row sqlstore.Row) (reconcile.Delivery, error) {
	var (
		d                               reconcile.Delivery
		types, typ, state               string
		subCreated, from, next, created int64
		delivered, leaseUntil, token    *int64
		owner                           *string
	)
	err := row.Scan(&d.Subscription.Name, &d.Subscription.URL, &d.Subscription.Secret, &types, &subCreated,
		&d.EventID, &d.PurchaseID, &d.Sequence, &typ, &d.Payload, &state, &d.Attempts,
		&from, &next, &d.LastError, &created, &delivered,
		&owner, &token, &leaseUntil)
	d.Subscription.Types, d.Subscription.CreatedAt = sqlstore.SplitTypes(types), fromMicros(subCreated)
	d.Type, d.State = events.Type(typ), reconcile.DeliveryState(state)
	d.WindowFrom, d.NextAttemptAt, d.CreatedAt = fromMicros(from), fromMicros(next), fromMicros(created)
	d.DeliveredAt, d.LeaseExpiresAt = fromNullMicros(delivered), fromNullMicros(leaseUntil)
	d.LeaseOwner = sqlstore.DerefString(owner)
	if token != nil {
		d.LeaseToken = *token
	}
	return d, err
}

// ClaimDeliveries implements reconcile.Tx. The transaction is the only
// writer, so the deliveries it reads as due and first of their
// (subscription, purchase) stay so until it commits; each gets the next
// token of outbox_lease_tokens.
func (t *txn) ClaimDeliveries(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]reconcile.Delivery, error) {
	what := "claim deliveries for " + owner
	if err := dialect.CheckClaim(what, owner, limit, leaseFor); err != nil {
		return nil, err
	}
	now := storeNow(t.now)
	type key struct{ sub, event string }
	keys, err := queryAll(ctx, t, func(row sqlstore.Row) (key, error) {
		var k key
		return k, row.Scan(&k.sub, &k.event)
	}, what, `SELECT d.subscription, d.event_id FROM outbox_deliveries d
WHERE d.state = 'pending' AND d.next_attempt_at <= ?1
  AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= ?1)
  AND NOT EXISTS (SELECT 1 FROM outbox_deliveries e
      WHERE e.subscription = d.subscription AND e.purchase_id = d.purchase_id
        AND e.state <> 'done' AND e.sequence < d.sequence)
ORDER BY d.next_attempt_at, d.created_at, d.sequence
LIMIT ?2`, now.UnixMicro(), limit)
	if err != nil {
		return nil, err
	}
	out := make([]reconcile.Delivery, 0, len(keys))
	for _, k := range keys {
		if _, err := t.exec(ctx, `UPDATE outbox_deliveries
SET lease_owner = ?3, lease_expires_at = ?4, attempts = attempts + 1,
    lease_token = (SELECT last + 1 FROM outbox_lease_tokens WHERE id = 1)
WHERE subscription = ?1 AND event_id = ?2`, k.sub, k.event, owner, micros(now.Add(leaseFor))); err != nil {
			return nil, wrap(err, "%s", what)
		}
		if _, err := t.exec(ctx, `UPDATE outbox_lease_tokens SET last = last + 1 WHERE id = 1`); err != nil {
			return nil, wrap(err, "%s: next token", what)
		}
		d, err := queryOne(ctx, t, scanDelivery, what, `SELECT `+deliveryColumns+deliveryFrom+`
WHERE d.subscription = ?1 AND d.event_id = ?2`, k.sub, k.event)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// FinishDelivery implements reconcile.Tx: one conditional UPDATE on the
// lease, and for a dead delivery one more for the later ones of its
// purchase.
func (t *txn) FinishDelivery(ctx context.Context, d reconcile.Delivery, state reconcile.DeliveryState, next time.Time, lastError string) error {
	what := fmt.Sprintf("finish delivery of %s to %s as %s", d.EventID, d.Subscription.Name, state)
	if err := dialect.CheckDeliveryOutcome(what, state, next); err != nil {
		return err
	}
	now := storeNow(t.now)
	var delivered any
	if state == reconcile.DeliveryDone {
		delivered = now.UnixMicro()
	}
	n, err := t.exec(ctx, `UPDATE outbox_deliveries
SET state = ?5, next_attempt_at = COALESCE(?6, next_attempt_at), last_error = ?7, delivered_at = ?8,
    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
WHERE subscription = ?1 AND event_id = ?2 AND lease_owner = ?3 AND lease_token = ?4 AND state = 'pending'`,
		d.Subscription.Name, d.EventID, d.LeaseOwner, d.LeaseToken, string(state), micros(next), lastError, delivered)
	if err != nil {
		return wrap(err, "%s", what)
	}
	if n == 0 {
		return dialect.LeaseLostDelivery(d)
	}
	if state != reconcile.DeliveryDead {
		return nil
	}
	if _, err := t.exec(ctx, `UPDATE outbox_deliveries
SET state = 'dead', last_error = ?4
WHERE subscription = ?1 AND purchase_id = ?2 AND sequence > ?3 AND state = 'pending'`,
		d.Subscription.Name, d.PurchaseID, d.Sequence, "an earlier event of the purchase is dead: "+d.EventID); err != nil {
		return wrap(err, "%s: the later deliveries of %s", what, d.PurchaseID)
	}
	return nil
}

// ListDeliveries implements reconcile.Tx.
func (t *txn) ListDeliveries(ctx context.Context, state reconcile.DeliveryState, limit int) ([]reconcile.Delivery, error) {
	what := fmt.Sprintf("list %s deliveries", state)
	if err := dialect.CheckCap(what, limit); err != nil {
		return nil, err
	}
	q := `SELECT ` + deliveryColumns + deliveryFrom + `
WHERE d.state = ?1
ORDER BY d.created_at, d.purchase_id, d.sequence, d.subscription`
	args := []any{string(state)}
	if limit > 0 {
		q += ` LIMIT ?2`
		args = append(args, limit)
	}
	return queryAll(ctx, t, scanDelivery, what, q, args...)
}

// ReplayDeliveries implements reconcile.Tx in two statements: the
// missing deliveries, then the done or dead ones made pending.
func (t *txn) ReplayDeliveries(ctx context.Context, subscription string, since time.Time, deadOnly bool) (int, error) {
	what := fmt.Sprintf("replay deliveries since %s", since.UTC().Format(time.RFC3339))
	if subscription != "" {
		what += " to " + subscription
	}
	now := storeNow(t.now).UnixMicro()
	var added int64
	if !deadOnly {
		var err error
		added, err = t.exec(ctx, `INSERT INTO outbox_deliveries
    (subscription, event_id, purchase_id, sequence, next_attempt_at, window_from, created_at)
SELECT s.name, o.event_id, o.purchase_id, o.sequence, ?1, ?1, o.created_at
FROM outbox o JOIN outbox_subscriptions s
  ON s.event_types = '' OR instr(',' || s.event_types || ',', ',' || o.event_type || ',') > 0
WHERE o.created_at >= ?2 AND (?3 = '' OR s.name = ?3)
ON CONFLICT (subscription, event_id) DO NOTHING`, now, since.UnixMicro(), subscription)
		if err != nil {
			return 0, wrap(err, "%s: the missing deliveries", what)
		}
	}
	n, err := t.exec(ctx, `UPDATE outbox_deliveries
SET state = 'pending', next_attempt_at = ?1, window_from = ?1, delivered_at = NULL,
    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
WHERE (?3 = '' OR subscription = ?3)
  AND (state = 'dead' OR (state = 'done' AND NOT ?4))
  AND event_id IN (SELECT event_id FROM outbox WHERE created_at >= ?2)`, now, since.UnixMicro(), subscription, deadOnly)
	if err != nil {
		return 0, wrap(err, "%s", what)
	}
	return int(added + n), nil
}

// OutboxStats implements reconcile.Tx in one read of the open deliveries.
func (t *txn) OutboxStats(ctx context.Context) (reconcile.OutboxStats, error) {
	return queryOne(ctx, t, func(row sqlstore.Row) (reconcile.OutboxStats, error) {
		var st reconcile.OutboxStats
		var oldest *int64
		err := row.Scan(&st.Pending, &st.Dead, &oldest)
		st.Oldest = fromNullMicros(oldest)
		return st, err
	}, "outbox stats", `SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'dead'),
    min(created_at) FILTER (WHERE state = 'pending')
FROM outbox_deliveries WHERE state <> 'done'`)
}

// OutboxBySubscription implements reconcile.Tx.
func (t *txn) OutboxBySubscription(ctx context.Context) ([]reconcile.SubscriptionOutbox, error) {
	return queryAll(ctx, t, func(row sqlstore.Row) (reconcile.SubscriptionOutbox, error) {
		var s reconcile.SubscriptionOutbox
		var oldest, next *int64
		err := row.Scan(&s.Name, &s.URL, &s.Pending, &s.Dead, &oldest, &next, &s.LastError)
		s.Oldest, s.NextAttempt = fromNullMicros(oldest), fromNullMicros(next)
		return s, err
	}, "outbox by subscription", outboxBySubscriptionSQL)
}

// outboxBySubscriptionSQL is OutboxBySubscription's query.
const outboxBySubscriptionSQL = `SELECT s.name, s.url,
    count(d.event_id) FILTER (WHERE d.state = 'pending'), count(d.event_id) FILTER (WHERE d.state = 'dead'),
    min(d.created_at) FILTER (WHERE d.state = 'pending'), min(d.next_attempt_at) FILTER (WHERE d.state = 'pending'),
    coalesce((SELECT e.last_error FROM outbox_deliveries e
        WHERE e.subscription = s.name AND e.state <> 'done' AND e.last_error <> ''
        ORDER BY e.state = 'dead', e.created_at, e.event_id LIMIT 1), '')
FROM outbox_subscriptions s LEFT JOIN outbox_deliveries d ON d.subscription = s.name AND d.state <> 'done'
GROUP BY s.name, s.url ORDER BY s.name`

// DeleteDeliveredOutboxBefore implements reconcile.Tx; the deliveries go
// with their events (ON DELETE CASCADE), and outbox_sequences keeps the
// purchases' counters.
func (t *txn) DeleteDeliveredOutboxBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	what := "delete delivered outbox events before " + before.UTC().Format(time.RFC3339)
	if err := dialect.CheckLimit(what, limit); err != nil {
		return 0, err
	}
	n, err := t.exec(ctx, `DELETE FROM outbox WHERE event_id IN (
    SELECT o.event_id FROM outbox o
    WHERE o.created_at < ?1
      AND NOT EXISTS (SELECT 1 FROM outbox_deliveries d WHERE d.event_id = o.event_id AND d.state <> 'done')
    ORDER BY o.created_at LIMIT ?2)`, before.UnixMicro(), limit)
	if err != nil {
		return 0, wrap(err, "%s", what)
	}
	return int(n), nil
}
