package reconcile

import (
	"context"
	"time"
)

// FindingStore is the part of Tx that the audit from the provider's side
// writes and reads: its findings, the payments it links to purchases, and
// its runs. The stores' findings.go implement it.
type FindingStore interface {
	// InsertFinding stores an audit finding unless one with the same
	// (Provider, PaymentID, Kind) exists, open or closed, and reports
	// whether it stored it. Like InsertInboxEvent it never reads first: a
	// concurrent insert of the same finding waits for the other
	// transaction and then reports false (or true if that one rolled
	// back). f.ID is ignored; an empty PurchaseID names no purchase. An
	// empty Provider or PaymentID, a kind not in FindingKinds, a zero
	// FoundAt, or a finding already closed (ClosedAt, ClosedBy or
	// CloseNote set) is refused with ErrInvalid.
	InsertFinding(ctx context.Context, f Finding) (inserted bool, err error)
	// GetFinding returns the finding with id, or ErrNotFound. The reads
	// of findings set Finding.Account from the finding's purchase.
	GetFinding(ctx context.Context, id int64) (Finding, error)
	// ListFindings returns findings, oldest first (by FoundAt, then ID):
	// the open ones, or all of them with includeClosed; only those of
	// purchaseID when it is not empty, and only those whose purchase is of
	// the account that account selects (a finding about no purchase is
	// of no account: AnyAccount alone selects it). limit caps how many,
	// after the filters (0: no cap; a negative limit is refused with
	// ErrInvalid).
	ListFindings(ctx context.Context, purchaseID string, account AccountFilter, includeClosed bool, limit int) ([]Finding, error)
	// CloseFinding closes an open finding with the operator's name and
	// note at now: the only change a finding takes. operator and note
	// must not be empty and now must not be zero (ErrInvalid otherwise).
	// Returns ErrNotFound for an unknown id and ErrConflict if it is
	// already closed: of two concurrent closes, the second waits for the
	// first and then gets ErrConflict.
	CloseFinding(ctx context.Context, id int64, operator, note string, now time.Time) error
	// CountOpenFindings returns how many findings are open, per kind;
	// every kind of FindingKinds is present, with 0 when it has none.
	CountOpenFindings(ctx context.Context) (map[FindingKind]int, error)

	// LinkAuditPayment records paymentID as the first money-taking payment
	// the audit saw for purchaseID, a purchase the books link to no
	// payment, unless one is recorded already, and returns the one
	// recorded: paymentID, or the earlier one. Like InsertFinding it never
	// reads before writing. Empty ids or a zero at are refused with
	// ErrInvalid.
	LinkAuditPayment(ctx context.Context, provider, purchaseID, paymentID string, at time.Time) (first string, err error)

	// GetAuditRun returns the named audit run, or ErrNotFound if none
	// was ever saved.
	GetAuditRun(ctx context.Context, name string) (AuditRun, error)
	// SaveAuditRun stores r under r.Name, replacing what was there. An
	// empty Name or a negative Findings is refused with ErrInvalid.
	SaveAuditRun(ctx context.Context, r AuditRun) error
}
