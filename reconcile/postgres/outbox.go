package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/events"
	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
)

// The transactional outbox and its deliveries (migration 00011).

const outboxColumns = `event_id, purchase_id, refund_id, event_type, schema_version, sequence, payload, digest, created_at`

// AppendOutbox implements reconcile.Tx in two statements whatever the
// number of events, under a savepoint of its own, so that a refused event
// leaves neither a sequence number taken nor a delivery written. The
// first statement takes the numbers of every purchase at once: its upsert
// of outbox_sequences adds the purchase's count of events and keeps the
// row locked until the transaction ends, so that a concurrent change of
// the same purchase waits, numbers follow the commit order, and a
// rollback gives them back. It takes the rows in purchase id order, so
// that two transactions appending for the same purchases cannot deadlock
// each other here. It also reads the latest recovery's time, the events'
// epoch (reconcile.EventEpochOf). The second statement writes the events
// and their deliveries.
func (t *txn) AppendOutbox(ctx context.Context, es ...events.Event) ([]reconcile.OutboxEvent, error) {
	if len(es) == 0 {
		return nil, nil
	}
	what := fmt.Sprintf("append %s event %s of %s", es[0].Type, es[0].ID, es[0].PurchaseID)
	if len(es) > 1 {
		what = fmt.Sprintf("append %d events", len(es))
	}
	counts := map[string]int64{}
	for _, e := range es {
		if err := dialect.CheckOutboxEvent(fmt.Sprintf("append %s event %s of %s", e.Type, e.ID, e.PurchaseID), e); err != nil {
			return nil, err
		}
		counts[e.PurchaseID]++
	}
	ids := slices.Sorted(maps.Keys(counts))
	ns := make([]int64, len(ids))
	for i, id := range ids {
		ns[i] = counts[id]
	}
	var out []reconcile.OutboxEvent
	err := t.Savepoint(ctx, func(reconcile.Tx) error {
		out = make([]reconcile.OutboxEvent, 0, len(es))
		rows, err := t.tx.Query(ctx, `INSERT INTO outbox_sequences AS s (purchase_id, last_sequence)
SELECT id, n FROM unnest($1::text[], $2::bigint[]) AS u(id, n) ORDER BY id
ON CONFLICT (purchase_id) DO UPDATE SET last_sequence = s.last_sequence + excluded.last_sequence
RETURNING purchase_id, last_sequence, (SELECT max(recorded_at) FROM recovery_epochs)`, ids, ns)
		if err != nil {
			return wrap(err, "%s: take their sequence numbers", what)
		}
		// next is each purchase's first number of this batch.
		next := make(map[string]int64, len(ids))
		var (
			id                string
			last              int64
			epochAt, recorded *time.Time
		)
		if _, err := pgx.ForEachRow(rows, []any{&id, &last, &recorded}, func() error {
			next[id] = last - counts[id] + 1
			epochAt = recorded
			return nil
		}); err != nil {
			return wrap(err, "%s: take their sequence numbers", what)
		}
		var c struct {
			id, purchase, refund, typ, digest []string
			version, seq                      []int64
			payload                           [][]byte
			created                           []time.Time
		}
		for _, e := range es {
			seq, ok := next[e.PurchaseID]
			if !ok {
				return fmt.Errorf("postgres: %s: no sequence number taken for %s", what, e.PurchaseID)
			}
			next[e.PurchaseID]++
			ev, err := dialect.OutboxEvent(what, e, seq, derefTime(epochAt))
			if err != nil {
				return err
			}
			out = append(out, ev)
			c.id, c.purchase, c.refund = append(c.id, ev.ID), append(c.purchase, ev.PurchaseID), append(c.refund, ev.RefundID)
			c.typ, c.version, c.seq = append(c.typ, string(ev.Type)), append(c.version, int64(ev.SchemaVersion)), append(c.seq, ev.Sequence)
			c.payload, c.digest, c.created = append(c.payload, ev.Payload), append(c.digest, ev.Digest), append(c.created, ev.CreatedAt)
		}
		if err := t.queryWith(ctx, genericPlan, drain, appendOutboxSQL,
			c.id, c.purchase, c.refund, c.typ, c.version, c.seq, c.payload, c.digest, c.created); err != nil {
			return wrap(err, "%s", what)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// appendOutboxSQL is AppendOutbox's second statement. The deliveries
// read the events from the insert's RETURNING: the foreign key to outbox
// is checked at the statement's end, when the events are there. It runs
// on its generic plan (genericPlan): it reads no table by the events, so
// its plan does not depend on what the tables hold, and planning it anew
// took 0.17 ms a call, as long as its execution.
const appendOutboxSQL = `WITH ev AS (
    INSERT INTO outbox (` + outboxColumns + `)
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::bigint[], $7::bytea[], $8::text[], $9::timestamptz[])
    RETURNING event_id, purchase_id, sequence, event_type, created_at
)
INSERT INTO outbox_deliveries
    (subscription, event_id, purchase_id, sequence, next_attempt_at, window_from, created_at)
SELECT s.name, ev.event_id, ev.purchase_id, ev.sequence, ev.created_at, ev.created_at, ev.created_at
FROM ev JOIN outbox_subscriptions s
    ON s.event_types = '' OR position(',' || ev.event_type || ',' IN ',' || s.event_types || ',') > 0`

// ListOutbox implements reconcile.Tx.
func (t *txn) ListOutbox(ctx context.Context, purchaseID string) ([]reconcile.OutboxEvent, error) {
	return queryAll(ctx, t, scanOutbox, "list outbox of "+purchaseID,
		`SELECT `+outboxColumns+` FROM outbox WHERE purchase_id = $1 ORDER BY sequence`, purchaseID)
}

func scanOutbox(row sqlstore.Row) (reconcile.OutboxEvent, error) {
	var e reconcile.OutboxEvent
	var typ string
	err := row.Scan(&e.ID, &e.PurchaseID, &e.RefundID, &typ, &e.SchemaVersion, &e.Sequence, &e.Payload, &e.Digest, &e.CreatedAt)
	e.Type, e.CreatedAt = events.Type(typ), e.CreatedAt.UTC()
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
VALUES ($2, $3, $4, $5, `+nowSQL+`)`, clockArg(t.now), s.Name, s.URL, s.Secret, sqlstore.JoinTypes(s.Types)); err != nil {
		return wrap(err, "%s", what)
	}
	return nil
}

// ListSubscriptions implements reconcile.Tx.
func (t *txn) ListSubscriptions(ctx context.Context) ([]reconcile.Subscription, error) {
	return queryAll(ctx, t, func(row sqlstore.Row) (reconcile.Subscription, error) {
		var s reconcile.Subscription
		var types string
		err := row.Scan(&s.Name, &s.URL, &s.Secret, &types, &s.CreatedAt)
		s.Types, s.CreatedAt = sqlstore.SplitTypes(types), s.CreatedAt.UTC()
		return s, err
	}, "list subscriptions", `SELECT name, url, secret, event_types, created_at FROM outbox_subscriptions ORDER BY name`)
}

// DeleteSubscription implements reconcile.Tx; its deliveries go with it
// (ON DELETE CASCADE).
func (t *txn) DeleteSubscription(ctx context.Context, name string) error {
	return t.execOne(ctx, "delete subscription "+name, `DELETE FROM outbox_subscriptions WHERE name = $1`, name)
}

const deliveryColumns = `d.subscription, s.url, s.secret, s.event_types, s.created_at,
    d.event_id, d.purchase_id, d.sequence, o.event_type, o.payload, d.state, d.attempts,
    d.window_from, d.next_attempt_at, d.last_error, d.created_at, d.delivered_at,
    d.lease_owner, d.lease_token, d.lease_expires_at`

func scanDelivery(row sqlstore.Row) (reconcile.Delivery, error) {
	var (
		d                     reconcile.Delivery
		types, typ, state     string
		delivered, leaseUntil *time.Time
		owner                 *string
		token                 *int64
	)
	err := row.Scan(&d.Subscription.Name, &d.Subscription.URL, &d.Subscription.Secret, &types, &d.Subscription.CreatedAt,
		&d.EventID, &d.PurchaseID, &d.Sequence, &typ, &d.Payload, &state, &d.Attempts,
		&d.WindowFrom, &d.NextAttemptAt, &d.LastError, &d.CreatedAt, &delivered,
		&owner, &token, &leaseUntil)
	d.Subscription.Types, d.Subscription.CreatedAt = sqlstore.SplitTypes(types), d.Subscription.CreatedAt.UTC()
	d.Type, d.State = events.Type(typ), reconcile.DeliveryState(state)
	d.WindowFrom, d.NextAttemptAt, d.CreatedAt = d.WindowFrom.UTC(), d.NextAttemptAt.UTC(), d.CreatedAt.UTC()
	d.DeliveredAt, d.LeaseExpiresAt = derefTime(delivered), derefTime(leaseUntil)
	if owner != nil {
		d.LeaseOwner = *owner
	}
	if token != nil {
		d.LeaseToken = *token
	}
	return d, err
}

// ClaimDeliveries implements reconcile.Tx in one statement: the due
// deliveries that no earlier open delivery of their (subscription,
// purchase) precedes are locked FOR UPDATE SKIP LOCKED, so that a
// concurrent claim passes over them, and leased with tokens from
// outbox_lease_tokens. A row another claim leased and committed since
// this statement's snapshot is re-read when locked, and skipped if it no
// longer qualifies (its lease is live, or it is done).
func (t *txn) ClaimDeliveries(ctx context.Context, owner string, limit int, leaseFor time.Duration) ([]reconcile.Delivery, error) {
	what := "claim deliveries for " + owner
	if err := dialect.CheckClaim(what, owner, limit, leaseFor); err != nil {
		return nil, err
	}
	return queryAll(ctx, t, scanDelivery, what, `WITH picked AS (
    SELECT d.subscription, d.event_id FROM outbox_deliveries d
    WHERE d.state = 'pending' AND d.next_attempt_at <= `+nowSQL+`
      AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= `+nowSQL+`)
      AND NOT EXISTS (SELECT 1 FROM outbox_deliveries e
          WHERE e.subscription = d.subscription AND e.purchase_id = d.purchase_id
            AND e.state <> 'done' AND e.sequence < d.sequence)
    ORDER BY d.next_attempt_at, d.created_at, d.sequence
    LIMIT $2
    FOR UPDATE OF d SKIP LOCKED
), claimed AS (
    UPDATE outbox_deliveries d
    SET lease_owner = $3, lease_token = nextval('outbox_lease_tokens'),
        lease_expires_at = `+nowSQL+` + $4::interval, attempts = d.attempts + 1
    FROM picked p
    WHERE d.subscription = p.subscription AND d.event_id = p.event_id
    RETURNING d.*
)
SELECT `+deliveryColumns+`
FROM claimed d
JOIN outbox_subscriptions s ON s.name = d.subscription
JOIN outbox o ON o.event_id = d.event_id
ORDER BY d.next_attempt_at, d.created_at, d.sequence`, clockArg(t.now), limit, owner, leaseFor)
}

// FinishDelivery implements reconcile.Tx: one conditional UPDATE on the
// lease, and for a dead delivery one more for the later ones of its
// purchase.
func (t *txn) FinishDelivery(ctx context.Context, d reconcile.Delivery, state reconcile.DeliveryState, next time.Time, lastError string) error {
	what := fmt.Sprintf("finish delivery of %s to %s as %s", d.EventID, d.Subscription.Name, state)
	if err := dialect.CheckDeliveryOutcome(what, state, next); err != nil {
		return err
	}
	n, err := t.exec(ctx, `UPDATE outbox_deliveries
SET state = $6, next_attempt_at = COALESCE($7, next_attempt_at), last_error = $8,
    delivered_at = CASE WHEN $6 = 'done' THEN `+nowSQL+` END,
    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
WHERE subscription = $2 AND event_id = $3 AND lease_owner = $4 AND lease_token = $5 AND state = 'pending'`,
		clockArg(t.now), d.Subscription.Name, d.EventID, d.LeaseOwner, d.LeaseToken, string(state), nullTime(next), lastError)
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
SET state = 'dead', last_error = $4
WHERE subscription = $1 AND purchase_id = $2 AND sequence > $3 AND state = 'pending'`,
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
	q := `SELECT ` + deliveryColumns + `
FROM outbox_deliveries d
JOIN outbox_subscriptions s ON s.name = d.subscription
JOIN outbox o ON o.event_id = d.event_id
WHERE d.state = $1
ORDER BY d.created_at, d.purchase_id, d.sequence, d.subscription`
	args := []any{string(state)}
	if limit > 0 {
		q += ` LIMIT $2`
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
	var added int64
	if !deadOnly {
		var err error
		added, err = t.exec(ctx, `INSERT INTO outbox_deliveries
    (subscription, event_id, purchase_id, sequence, next_attempt_at, window_from, created_at)
SELECT s.name, o.event_id, o.purchase_id, o.sequence, `+nowSQL+`, `+nowSQL+`, o.created_at
FROM outbox o JOIN outbox_subscriptions s
  ON s.event_types = '' OR position(',' || o.event_type || ',' IN ',' || s.event_types || ',') > 0
WHERE o.created_at >= $2 AND ($3 = '' OR s.name = $3)
ON CONFLICT (subscription, event_id) DO NOTHING`, clockArg(t.now), since, subscription)
		if err != nil {
			return 0, wrap(err, "%s: the missing deliveries", what)
		}
	}
	n, err := t.exec(ctx, `UPDATE outbox_deliveries d
SET state = 'pending', next_attempt_at = `+nowSQL+`, window_from = `+nowSQL+`, delivered_at = NULL,
    lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
FROM outbox o
WHERE o.event_id = d.event_id AND o.created_at >= $2 AND ($3 = '' OR d.subscription = $3)
  AND (d.state = 'dead' OR (d.state = 'done' AND NOT $4))`, clockArg(t.now), since, subscription, deadOnly)
	if err != nil {
		return 0, wrap(err, "%s", what)
	}
	return int(added + n), nil
}

// OutboxStats implements reconcile.Tx in one read of the open deliveries.
func (t *txn) OutboxStats(ctx context.Context) (reconcile.OutboxStats, error) {
	return queryOne(ctx, t, func(row sqlstore.Row) (reconcile.OutboxStats, error) {
		var st reconcile.OutboxStats
		var oldest *time.Time
		err := row.Scan(&st.Pending, &st.Dead, &oldest)
		st.Oldest = derefTime(oldest)
		return st, err
	}, "outbox stats", `SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'dead'),
    min(created_at) FILTER (WHERE state = 'pending')
FROM outbox_deliveries WHERE state <> 'done'`)
}

// OutboxBySubscription implements reconcile.Tx.
func (t *txn) OutboxBySubscription(ctx context.Context) ([]reconcile.SubscriptionOutbox, error) {
	return queryAll(ctx, t, func(row sqlstore.Row) (reconcile.SubscriptionOutbox, error) {
		var s reconcile.SubscriptionOutbox
		var oldest, next *time.Time
		err := row.Scan(&s.Name, &s.URL, &s.Pending, &s.Dead, &oldest, &next, &s.LastError)
		s.Oldest, s.NextAttempt = derefTime(oldest), derefTime(next)
		return s, err
	}, "outbox by subscription", `SELECT s.name, s.url,
    count(d.event_id) FILTER (WHERE d.state = 'pending'), count(d.event_id) FILTER (WHERE d.state = 'dead'),
    min(d.created_at) FILTER (WHERE d.state = 'pending'), min(d.next_attempt_at) FILTER (WHERE d.state = 'pending'),
    coalesce((SELECT e.last_error FROM outbox_deliveries e
        WHERE e.subscription = s.name AND e.state <> 'done' AND e.last_error <> ''
        ORDER BY e.state = 'dead', e.created_at, e.event_id LIMIT 1), '')
FROM outbox_subscriptions s LEFT JOIN outbox_deliveries d ON d.subscription = s.name AND d.state <> 'done'
GROUP BY s.name, s.url ORDER BY s.name`)
}

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
    WHERE o.created_at < $1
      AND NOT EXISTS (SELECT 1 FROM outbox_deliveries d WHERE d.event_id = o.event_id AND d.state <> 'done')
    ORDER BY o.created_at LIMIT $2)`, before, limit)
	if err != nil {
		return 0, wrap(err, "%s", what)
	}
	return int(n), nil
}
