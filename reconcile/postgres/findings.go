package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
)

// The audit from the provider's side: its findings and its runs
// (migration 00004).
//
// A finding never changes but to be closed, once: the database refuses
// any other UPDATE of audit_findings, and DELETE and TRUNCATE (SQLSTATE
// PR002), whatever SQL path tries.

var findingColumns = `id, provider, payment_id, kind, purchase_id, amount, currency, status, evidence,
    found_at, closed_at, closed_by, close_note, ` + findingAccount

// findingAccount is the account of a finding's purchase, read with it.
var findingAccount = sqlstore.AccountOfPurchase("audit_findings.purchase_id")

// InsertFinding implements reconcile.Tx with one INSERT ... ON CONFLICT
// DO NOTHING on (provider, payment_id, kind), as InsertInboxEvent: a
// concurrent insert of the same finding waits on the unique index for
// the other transaction. An empty PurchaseID is stored as NULL.
func (t *txn) InsertFinding(ctx context.Context, f reconcile.Finding) (bool, error) {
	what := fmt.Sprintf("insert %s finding of %s/%s", f.Kind, f.Provider, f.PaymentID)
	if err := dialect.CheckNewFinding(what, f); err != nil {
		return false, err
	}
	n, err := t.exec(ctx, `INSERT INTO audit_findings
    (provider, payment_id, kind, purchase_id, amount, currency, status, evidence, found_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (provider, payment_id, kind) DO NOTHING`,
		f.Provider, f.PaymentID, string(f.Kind), sqlstore.NullString(f.PurchaseID), f.Amount, f.Currency, f.Status, f.Evidence,
		nullTime(f.FoundAt))
	if err != nil {
		return false, wrap(err, "%s", what)
	}
	return n == 1, nil
}

// GetFinding implements reconcile.Tx.
func (t *txn) GetFinding(ctx context.Context, id int64) (reconcile.Finding, error) {
	return queryOne(ctx, t, scanFinding, fmt.Sprintf("get finding %d", id),
		`SELECT `+findingColumns+` FROM audit_findings WHERE id = $1`, id)
}

// ListFindings implements reconcile.Tx. The open findings are read from
// the partial index audit_findings_open_idx, a purchase's from
// audit_findings_purchase_idx.
func (t *txn) ListFindings(ctx context.Context, purchaseID string, account reconcile.AccountFilter, includeClosed bool, limit int) ([]reconcile.Finding, error) {
	what := "list findings"
	if purchaseID != "" {
		what += " of " + purchaseID
	}
	if a, ok := account.Account(); ok {
		what += " of account " + reconcile.AccountLabel(a)
	}
	if err := dialect.CheckCap(what, limit); err != nil {
		return nil, err
	}
	query, args := listFindingsSQL(purchaseID, account, includeClosed, limit)
	return queryAll(ctx, t, scanFinding, what, query, args...)
}

// listFindingsSQL returns ListFindings' query and its arguments. The
// conditions are literals where they can be, so that the planner can use
// the partial indexes in a generic plan too.
func listFindingsSQL(purchaseID string, account reconcile.AccountFilter, includeClosed bool, limit int) (string, []any) {
	var conds []string
	var args []any
	if !includeClosed {
		conds = append(conds, `closed_at IS NULL`)
	}
	if purchaseID != "" {
		args = append(args, purchaseID)
		conds = append(conds, fmt.Sprintf(`purchase_id = $%d`, len(args)))
	}
	if a, ok := account.Account(); ok {
		args = append(args, a)
		conds = append(conds, sqlstore.PurchaseOfAccount("audit_findings.purchase_id", fmt.Sprintf(`$%d`, len(args))))
	}
	query := `SELECT ` + findingColumns + ` FROM audit_findings`
	if len(conds) > 0 {
		query += ` WHERE ` + strings.Join(conds, ` AND `)
	}
	var capped any // LIMIT NULL: no cap
	if limit > 0 {
		capped = limit
	}
	args = append(args, capped)
	query += fmt.Sprintf(` ORDER BY found_at, id LIMIT $%d`, len(args))
	return query, args
}

// CloseFinding implements reconcile.Tx with one conditional UPDATE of
// the close columns, the only change the database allows. A concurrent
// close waits for this one's row lock, then finds the finding closed.
func (t *txn) CloseFinding(ctx context.Context, id int64, operator, note string, now time.Time) error {
	what := fmt.Sprintf("close finding %d", id)
	if err := dialect.CheckCloseFinding(what, operator, note, now); err != nil {
		return err
	}
	n, err := t.exec(ctx, `UPDATE audit_findings SET closed_at = $2, closed_by = $3, close_note = $4
WHERE id = $1 AND closed_at IS NULL`, id, now, operator, note)
	if err != nil {
		return wrap(err, "%s by %q", what, operator)
	}
	if n == 1 {
		return nil
	}
	// Say why not; this is the failure path only.
	var closedAt *time.Time
	var closedBy string
	err = t.tx.QueryRow(ctx, `SELECT closed_at, closed_by FROM audit_findings WHERE id = $1`, id).Scan(&closedAt, &closedBy)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return dialect.NotFound(what)
	case err != nil:
		return wrap(err, "%s", what)
	}
	return dialect.Conflict(fmt.Sprintf("%s by %q", what, operator), sqlstore.ClosedDetail(closedBy, derefTime(closedAt)))
}

// CountOpenFindings implements reconcile.Tx.
func (t *txn) CountOpenFindings(ctx context.Context) (map[reconcile.FindingKind]int, error) {
	counts := sqlstore.FindingCounts()
	if _, err := queryAll(ctx, t, sqlstore.ScanCounts(counts), "count open findings",
		countOpenFindingsSQL); err != nil {
		return nil, err
	}
	return counts, nil
}

// countOpenFindingsSQL is CountOpenFindings' query, read from the partial
// index audit_findings_open_idx: the open findings, not the closed ones.
const countOpenFindingsSQL = `SELECT kind, count(*) FROM audit_findings WHERE closed_at IS NULL GROUP BY kind`

// LinkAuditPayment implements reconcile.Tx with INSERT ... ON CONFLICT
// DO NOTHING on (provider, purchase_id), then reads the row that stands.
func (t *txn) LinkAuditPayment(ctx context.Context, provider, purchaseID, paymentID string, at time.Time) (string, error) {
	what := fmt.Sprintf("link audit payment %s of %s/%s", paymentID, provider, purchaseID)
	if _, err := t.exec(ctx, `INSERT INTO audit_links (provider, purchase_id, payment_id, linked_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (provider, purchase_id) DO NOTHING`, provider, purchaseID, paymentID, nullTime(at)); err != nil {
		return "", wrap(err, "%s", what)
	}
	var first string
	err := t.tx.QueryRow(ctx, `SELECT payment_id FROM audit_links WHERE provider = $1 AND purchase_id = $2`,
		provider, purchaseID).Scan(&first)
	if err != nil {
		return "", wrap(err, "%s", what)
	}
	return first, nil
}

const auditRunColumns = `name, window_from, window_until, done_until, started_at, updated_at, findings`

// GetAuditRun implements reconcile.Tx.
func (t *txn) GetAuditRun(ctx context.Context, name string) (reconcile.AuditRun, error) {
	return queryOne(ctx, t, scanAuditRun, fmt.Sprintf("get audit run %q", name), getAuditRunSQL, name)
}

// getAuditRunSQL is GetAuditRun's query, by the primary key.
const getAuditRunSQL = `SELECT ` + auditRunColumns + ` FROM audit_runs WHERE name = $1`

// SaveAuditRun implements reconcile.Tx with one upsert on the name.
func (t *txn) SaveAuditRun(ctx context.Context, r reconcile.AuditRun) error {
	_, err := t.exec(ctx, `INSERT INTO audit_runs (`+auditRunColumns+`)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (name) DO UPDATE SET
    window_from = EXCLUDED.window_from,
    window_until = EXCLUDED.window_until,
    done_until = EXCLUDED.done_until,
    started_at = EXCLUDED.started_at,
    updated_at = EXCLUDED.updated_at,
    findings = EXCLUDED.findings`,
		r.Name, nullTime(r.From), nullTime(r.Until), nullTime(r.Done), nullTime(r.StartedAt), nullTime(r.UpdatedAt), r.Findings)
	if err != nil {
		return wrap(err, "save audit run %q", r.Name)
	}
	return nil
}

// scanFinding reads one row of findingColumns.
func scanFinding(row sqlstore.Row) (reconcile.Finding, error) {
	var f reconcile.Finding
	var kind string
	var purchaseID *string
	var closed *time.Time
	err := row.Scan(&f.ID, &f.Provider, &f.PaymentID, &kind, &purchaseID, &f.Amount, &f.Currency, &f.Status, &f.Evidence,
		&f.FoundAt, &closed, &f.ClosedBy, &f.CloseNote, &f.Account)
	if err != nil {
		return reconcile.Finding{}, err
	}
	f.Kind = reconcile.FindingKind(kind)
	f.PurchaseID = sqlstore.DerefString(purchaseID)
	f.FoundAt = f.FoundAt.UTC()
	f.ClosedAt = derefTime(closed)
	return f, nil
}

// scanAuditRun reads one row of auditRunColumns.
func scanAuditRun(row sqlstore.Row) (reconcile.AuditRun, error) {
	var r reconcile.AuditRun
	var from, until, done, started, updated *time.Time
	if err := row.Scan(&r.Name, &from, &until, &done, &started, &updated, &r.Findings); err != nil {
		return reconcile.AuditRun{}, err
	}
	r.From, r.Until, r.Done = derefTime(from), derefTime(until), derefTime(done)
	r.StartedAt, r.UpdatedAt = derefTime(started), derefTime(updated)
	return r, nil
}
