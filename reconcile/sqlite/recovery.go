package sqlite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
)

// InsertRecovery implements reconcile.Tx.
func (t *txn) InsertRecovery(ctx context.Context, r reconcile.Recovery) (int64, error) {
	const what = "insert recovery epoch"
	if err := dialect.CheckNewRecovery(what, r); err != nil {
		return 0, err
	}
	var id int64
	err := t.tx.QueryRowContext(ctx, `INSERT INTO recovery_epochs (restored_at, recorded_at, audit_from, audit_until)
VALUES (?1, ?2, ?3, ?4) RETURNING id`, micros(r.RestoredAt), micros(r.RecordedAt), micros(r.AuditFrom), micros(r.AuditUntil)).Scan(&id)
	if err != nil {
		return 0, wrap(err, "%s", what)
	}
	return id, nil
}

// OpenRecovery implements reconcile.Tx, from the partial index of open
// epochs.
func (t *txn) OpenRecovery(ctx context.Context) (reconcile.Recovery, error) {
	return queryOne(ctx, t, scanRecovery, "open recovery epoch", `SELECT `+sqlstore.RecoveryColumns+`
FROM recovery_epochs WHERE completed_at IS NULL ORDER BY recorded_at DESC, id DESC LIMIT 1`)
}

// ListRecoveries implements reconcile.Tx.
func (t *txn) ListRecoveries(ctx context.Context, limit int) ([]reconcile.Recovery, error) {
	if err := dialect.CheckCap("list recovery epochs", limit); err != nil {
		return nil, err
	}
	q := `SELECT ` + sqlstore.RecoveryColumns + ` FROM recovery_epochs ORDER BY recorded_at DESC, id DESC`
	if limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", limit)
	}
	return queryAll(ctx, t, scanRecovery, "list recovery epochs", q)
}

// CompleteRecovery implements reconcile.Tx.
func (t *txn) CompleteRecovery(ctx context.Context, id int64, relinked, orphans int, at time.Time) error {
	what := fmt.Sprintf("complete recovery epoch %d", id)
	if at.IsZero() || relinked < 0 || orphans < 0 {
		return dialect.Invalid(what, "a completion time and counts not negative are required")
	}
	n, err := t.exec(ctx, `UPDATE recovery_epochs SET completed_at = ?2, relinked = ?3, orphans = ?4
WHERE id = ?1 AND completed_at IS NULL`, id, micros(at), relinked, orphans)
	if err != nil {
		return wrap(err, "%s", what)
	}
	if n == 1 {
		return nil
	}
	var exists bool
	if err := t.tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM recovery_epochs WHERE id = ?1)`, id).Scan(&exists); err != nil {
		return wrap(err, "%s", what)
	}
	if !exists {
		return dialect.NotFound(what)
	}
	return dialect.Conflict(what, "completed already")
}

// CountRecoveryHeld implements reconcile.Tx.
func (t *txn) CountRecoveryHeld(ctx context.Context, cutoff time.Time) (int, int, error) {
	var p, r int
	err := t.tx.QueryRowContext(ctx, `SELECT
  (SELECT count(*) FROM purchases WHERE created_at < ?1 AND state NOT IN ('succeeded', 'declined')),
  (SELECT count(*) FROM refunds WHERE created_at < ?1 AND state NOT IN ('succeeded', 'failed'))`, micros(cutoff)).Scan(&p, &r)
	if err != nil {
		return 0, 0, wrap(err, "count purchases and refunds held by recovery")
	}
	return p, r, nil
}

// SendHorizon implements reconcile.Tx.
func (t *txn) SendHorizon(ctx context.Context) (time.Time, error) {
	var sent, first int64
	err := t.tx.QueryRowContext(ctx, `SELECT max(
  coalesce((SELECT max(first_attempt_at) FROM purchases WHERE first_attempt_at IS NOT NULL), 0),
  coalesce((SELECT max(first_attempt_at) FROM refunds), 0),
  coalesce((SELECT max(recorded_at) FROM recovery_epochs), 0)),
  coalesce(min(
    coalesce((SELECT min(created_at) FROM purchases), (SELECT min(created_at) FROM refunds)),
    coalesce((SELECT min(created_at) FROM refunds), (SELECT min(created_at) FROM purchases))), 0)`).Scan(&sent, &first)
	if err != nil {
		return time.Time{}, wrap(err, "send horizon")
	}
	switch {
	case sent != 0:
		return fromMicros(sent), nil
	case first != 0:
		return fromMicros(first), nil
	}
	return time.Time{}, nil
}

// SystemIdentifier implements reconcile.Tx: SQLite has none. A restored
// file is a byte copy of the old one, so anything recorded in it is
// restored with it and cannot tell the copy from the original.
func (t *txn) SystemIdentifier(context.Context) (string, string, error) {
	return "", "", fmt.Errorf("sqlite: system identifier: %w", errors.ErrUnsupported)
}

// RecordSystemIdentifier implements reconcile.Tx with one upsert (kept
// for the interface's sake: SystemIdentifier never reads it).
func (t *txn) RecordSystemIdentifier(ctx context.Context, id string, at time.Time) error {
	if id == "" || at.IsZero() {
		return dialect.Invalid("record system identifier", "an identifier and a time are required")
	}
	_, err := t.exec(ctx, `INSERT INTO payrecon_instance (name, value, recorded_at) VALUES (?1, ?2, ?3)
ON CONFLICT (name) DO UPDATE SET value = excluded.value, recorded_at = excluded.recorded_at`,
		sqlstore.SystemIdentifierName, id, micros(at))
	if err != nil {
		return wrap(err, "record system identifier")
	}
	return nil
}

// scanRecovery reads one row of sqlstore.RecoveryColumns.
func scanRecovery(row sqlstore.Row) (reconcile.Recovery, error) {
	var r reconcile.Recovery
	var restored, recorded, from, until int64
	var completed *int64
	if err := row.Scan(&r.ID, &restored, &recorded, &from, &until, &completed, &r.Relinked, &r.Orphans); err != nil {
		return reconcile.Recovery{}, err
	}
	r.RestoredAt, r.RecordedAt = fromMicros(restored), fromMicros(recorded)
	r.AuditFrom, r.AuditUntil = fromMicros(from), fromMicros(until)
	r.CompletedAt = fromNullMicros(completed)
	return r, nil
}
