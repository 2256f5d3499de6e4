// Package sqlstore holds what reconcile/postgres and reconcile/sqlite say
// alike, so that each store keeps only what is its own: its SQL, how it
// encodes times, how it reads its driver's errors, and its subtle parts
// (claims and lease checks, PostgreSQL's savepoints and retries, SQLite's
// single writer).
//
// River keeps one hand-written driver per dialect, and so does payrecon:
// this package builds no SQL and runs no statement. It holds
//
//   - the shape of every error a store makes, "<dialect>: <what>: <kind>:
//     <detail or cause>" (Dialect's methods), with what a person reads (a
//     conflict, a lost lease, a refused claim, a refused input) as the
//     reconcile.Error's Detail, so that callers read it with
//     reconcile.DetailOf rather than from the message;
//   - the checks of inputs that both stores refuse alike (the Check
//     methods), and the explanations both give (ConflictDetail,
//     LeaseLostDetail, ClaimRefusal, ClosedDetail);
//   - the NULL handling of strings and byte strings, the stored provider
//     request's JSON, and the rows both drivers scan (Row, ScanCounts).
//
// Each store names itself once, as a Dialect constant in its errors.go,
// and calls these from methods that stay in the same files and the same
// order in both stores.
package sqlstore

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// Dialect is a store's name, the first word of each of its errors:
// "postgres", "sqlite".
type Dialect string

// Wrap returns err as the store's error for what, with kind (the
// reconcile sentinel the store's driver error stands for, or nil) before
// the driver's own message: "sqlite: insert purchase pur_1: duplicate:
// constraint failed: UNIQUE constraint failed: purchases.id (1555)".
// errors.Is finds both kind and the driver's error.
func (d Dialect) Wrap(err, kind error, what string) error {
	if kind != nil {
		return fmt.Errorf("%s: %s: %w: %w", d, what, kind, err)
	}
	return fmt.Errorf("%s: %s: %w", d, what, err)
}

// MissingPurchase returns err, a foreign key violation of a row that
// refers to a purchase, as reconcile.ErrNotFound: "postgres: insert job
// of pur_1: purchase not found: ERROR: insert or update on table ...".
func (d Dialect) MissingPurchase(err error, what string) error {
	return d.Missing(err, what, "purchase")
}

// Missing returns err, a foreign key violation of a row that refers to
// another, as reconcile.ErrNotFound naming the row referred to (ref: "purchase",
// "refund", ...): "sqlite: insert transition submitted -> failed of
// ref_1: refund not found: ...".
func (d Dialect) Missing(err error, what, ref string) error {
	return fmt.Errorf("%s: %s: %s %w: %w", d, what, ref, reconcile.ErrNotFound, err)
}

// NotFound returns the store's reconcile.ErrNotFound for what: "sqlite:
// get purchase pur_1: not found".
func (d Dialect) NotFound(what string) error {
	return fmt.Errorf("%s: %s: %w", d, what, reconcile.ErrNotFound)
}

// Fail returns the store's error of kind k for what, with detail as the
// reconcile.Error's Detail: "postgres: update purchase pur_1: conflict:
// state or version changed: it is uncertain at version 3, ...".
func (d Dialect) Fail(what string, k reconcile.Kind, detail string) error {
	return fmt.Errorf("%s: %s: %w", d, what, &reconcile.Error{Kind: k, Detail: detail})
}

// Invalid is Fail with reconcile.KindInvalid: detail names what is wrong
// with the input.
func (d Dialect) Invalid(what, detail string) error {
	return d.Fail(what, reconcile.KindInvalid, detail)
}

// Conflict is Fail with reconcile.KindConflict: detail says what the row
// is now.
func (d Dialect) Conflict(what, detail string) error {
	return d.Fail(what, reconcile.KindConflict, detail)
}

// LeaseLost returns the store's reconcile.ErrLeaseLost for a check of l,
// with detail (see LeaseLostDetail) saying what became of it.
func (d Dialect) LeaseLost(l reconcile.Lease, detail string) error {
	what := fmt.Sprintf("check lease of job %s (owner %q, token %d)", l.JobID(), l.Owner, l.Token)
	return d.Fail(what, reconcile.KindLeaseLost, detail)
}

// CheckLimit refuses a limit that is not positive.
func (d Dialect) CheckLimit(what string, limit int) error {
	if limit <= 0 {
		return d.Invalid(what, fmt.Sprintf("limit %d", limit))
	}
	return nil
}

// CheckCap refuses a negative cap; 0 is no cap.
func (d Dialect) CheckCap(what string, limit int) error {
	if limit < 0 {
		return d.Invalid(what, fmt.Sprintf("limit %d", limit))
	}
	return nil
}

// CheckClaim refuses a claim with an empty owner, or a limit or lease
// duration that is not positive.
func (d Dialect) CheckClaim(what, owner string, limit int, leaseFor time.Duration) error {
	switch {
	case owner == "":
		return d.Invalid(what, "empty owner")
	case limit <= 0:
		return d.Invalid(what, fmt.Sprintf("limit %d", limit))
	case leaseFor <= 0:
		return d.Invalid(what, fmt.Sprintf("lease duration %s", leaseFor))
	}
	return nil
}

// CheckJob refuses a job InsertJob cannot store: a kind that is not
// reconcile.JobPurchase (or empty) or reconcile.JobRefund, a refund's
// job without its refund or its purchase, and a purchase's job naming a
// refund.
func (d Dialect) CheckJob(what string, j reconcile.Job) error {
	switch j.Kind {
	case "", reconcile.JobPurchase:
		if j.RefundID != "" {
			return d.Invalid(what, fmt.Sprintf("a purchase's job names refund %q", j.RefundID))
		}
	case reconcile.JobRefund:
		if j.RefundID == "" || j.PurchaseID == "" {
			return d.Invalid(what, "a refund's job needs its RefundID and PurchaseID")
		}
	default:
		return d.Invalid(what, fmt.Sprintf("unknown job kind %q", j.Kind))
	}
	return nil
}

// JobKind returns the stored kind of job j: "purchase" for
// reconcile.JobPurchase or the zero value, "refund" for
// reconcile.JobRefund (CheckJob refuses the others).
func JobKind(j reconcile.JobKind) string {
	if j == "" {
		return string(reconcile.JobPurchase)
	}
	return string(j)
}

// CheckSweepLock refuses to acquire a sweep lock with an empty name or
// owner, or a ttl that is not positive.
func (d Dialect) CheckSweepLock(name, owner string, ttl time.Duration) error {
	switch {
	case name == "":
		return d.Invalid("acquire sweep lock", "empty name")
	case owner == "":
		return d.Invalid("acquire sweep lock "+name, "empty owner")
	case ttl <= 0:
		return d.Invalid("acquire sweep lock "+name, fmt.Sprintf("ttl %s", ttl))
	}
	return nil
}

// CheckNewFinding refuses to insert a finding that is already closed.
// The database checks the rest (provider, payment id, kind, found at).
func (d Dialect) CheckNewFinding(what string, f reconcile.Finding) error {
	if !f.ClosedAt.IsZero() || f.ClosedBy != "" || f.CloseNote != "" {
		return d.Invalid(what, "a new finding is open (ClosedAt, ClosedBy and CloseNote must be empty)")
	}
	return nil
}

// CheckCloseFinding refuses to close a finding without an operator, a
// note or a time.
func (d Dialect) CheckCloseFinding(what, operator, note string, now time.Time) error {
	switch {
	case operator == "":
		return d.Invalid(what, "empty operator")
	case note == "":
		return d.Invalid(what, "empty note")
	case now.IsZero():
		return d.Invalid(what, "zero time")
	}
	return nil
}

// Stamp formats t as the stores' errors show times: RFC 3339 with
// nanoseconds, in UTC.
func Stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ConflictDetail explains a conditional write of a purchase that lost:
// the row is in state at version, the write expected from at want.
func ConflictDetail(state statemachine.State, version int64, from statemachine.State, want int64) string {
	return fmt.Sprintf("it is %s at version %d, the write expected %s at version %d", state, version, from, want)
}

// NoSuchJob is the detail of a lease lost because its job is gone.
const NoSuchJob = "no such job"

// LeaseLostDetail explains why l is not j's current lease: another claim
// took the job over, or l expired.
func LeaseLostDetail(j reconcile.Job, l reconcile.Lease) string {
	if j.LeaseOwner != l.Owner || j.LeaseToken != l.Token {
		return fmt.Sprintf("taken over: now held by %q with token %d", j.LeaseOwner, j.LeaseToken)
	}
	return "expired at " + Stamp(j.LeaseExpiresAt)
}

// ClaimRefusal says why a claim at now may not take j (reconcile.Store's
// ClaimJob): it is done, or its lease has not expired. It returns "" when
// neither holds.
func ClaimRefusal(j reconcile.Job, now time.Time) string {
	switch {
	case !j.DoneAt.IsZero():
		return "it is done since " + Stamp(j.DoneAt)
	case j.LeaseOwner != "" && j.LeaseExpiresAt.After(now):
		return fmt.Sprintf("leased by %q until %s", j.LeaseOwner, Stamp(j.LeaseExpiresAt))
	}
	return ""
}

// ClosedDetail explains why a finding cannot be closed: by closed it at
// at.
func ClosedDetail(by string, at time.Time) string {
	return fmt.Sprintf("closed by %q at %s", by, Stamp(at))
}

// Row is a row to scan, as both drivers give it: pgx.Row and pgx.Rows,
// *sql.Row and *sql.Rows. Each store's scan functions take a Row.
type Row interface {
	Scan(dest ...any) error
}

// ScanString reads a row of one text column, for a store's queryAll.
func ScanString(row Row) (string, error) {
	var v string
	err := row.Scan(&v)
	return v, err
}

// ScanCounts returns a scan of rows of (key, count) that stores each
// count in counts, for a store's queryAll.
func ScanCounts[K ~string](counts map[K]int) func(Row) (struct{}, error) {
	return func(row Row) (struct{}, error) {
		var k string
		var n int
		err := row.Scan(&k, &n)
		counts[K(k)] = n
		return struct{}{}, err
	}
}

// StateCounts returns a count for every state, each 0.
func StateCounts() map[statemachine.State]int {
	counts := make(map[statemachine.State]int, len(statemachine.States))
	for _, s := range statemachine.States {
		counts[s] = 0
	}
	return counts
}

// RefundStateCounts returns a count for every state of
// statemachine.Refund, each 0.
func RefundStateCounts() map[statemachine.State]int {
	states := statemachine.Refund.States()
	counts := make(map[statemachine.State]int, len(states))
	for _, s := range states {
		counts[s] = 0
	}
	return counts
}

// FindingCounts returns a count for every kind of
// reconcile.FindingKinds, each 0.
func FindingCounts() map[reconcile.FindingKind]int {
	counts := make(map[reconcile.FindingKind]int, len(reconcile.FindingKinds))
	for _, k := range reconcile.FindingKinds {
		counts[k] = 0
	}
	return counts
}

// NullString maps "" to NULL, so that empty optional strings never
// collide in unique indexes.
func NullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// DerefString maps NULL (nil) to "".
func DerefString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// NullBytes maps an empty byte string to NULL.
func NullBytes(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return b
}

// NotNullBytes maps nil to an empty byte string, for NOT NULL columns.
func NotNullBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// NilIfEmpty maps an empty byte string read back to nil.
func NilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// MarshalRequest encodes a stored provider request (a purchase's
// *provider.CreateRequest, a refund's *provider.RefundRequest) as JSON,
// of type T (json.RawMessage for PostgreSQL's jsonb, string for SQLite's
// TEXT); nil stays NULL.
func MarshalRequest[T ~[]byte | ~string, R any](r *R) (any, error) {
	if r == nil {
		return nil, nil
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode provider request: %w", err)
	}
	return T(b), nil
}

// UnmarshalRequest decodes the provider request of purchaseID as
// MarshalRequest stored it; NULL (nil) is no request.
func UnmarshalRequest(purchaseID string, b []byte) (*provider.CreateRequest, error) {
	if b == nil {
		return nil, nil
	}
	r := new(provider.CreateRequest)
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("decode provider_request of %s: %w", purchaseID, err)
	}
	return r, nil
}

// UnmarshalRefundRequest decodes the provider request of refund refundID
// as MarshalRequest stored it; NULL (nil) is no request.
func UnmarshalRefundRequest(refundID string, b []byte) (*provider.RefundRequest, error) {
	if b == nil {
		return nil, nil
	}
	r := new(provider.RefundRequest)
	if err := json.Unmarshal(b, r); err != nil {
		return nil, fmt.Errorf("decode provider_request of %s: %w", refundID, err)
	}
	return r, nil
}

// Qualified returns columns, a comma-separated list, with each column
// qualified by alias ("p" makes "p.id, p.customer, ..."), for a
// statement that reads the columns of a joined table.
func Qualified(alias, columns string) string {
	parts := strings.Split(columns, ",")
	for i, c := range parts {
		parts[i] = alias + "." + strings.TrimSpace(c)
	}
	return strings.Join(parts, ", ")
}

// Around returns a Row whose Scan fills lead, then the destinations its
// caller gives, then trail: a scan function written for one table's
// columns reads a row that has other columns before and after them.
func Around(row Row, lead, trail []any) Row { return aroundRow{row, lead, trail} }

type aroundRow struct {
	row         Row
	lead, trail []any
}

func (r aroundRow) Scan(dest ...any) error {
	all := make([]any, 0, len(r.lead)+len(dest)+len(r.trail))
	all = append(append(append(all, r.lead...), dest...), r.trail...)
	return r.row.Scan(all...)
}

// NonEmpty returns ss without its empty strings.
func NonEmpty(ss []string) []string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// CheckMoves returns why moves is not a batch Tx.ApplyMoves can write,
// or nil: each move names one purchase (From and To the same), no
// purchase twice, is fenced by the lease of that purchase's own job (not
// a refund's) or by none (Move.Leaseless) and then leaves the job alone,
// records a transition exactly when the state changes and recording that
// change, records neither a transition nor an attempt of a refund nor a
// transition of a dispute, and has a time for a job it completes or
// reschedules.
func CheckMoves(moves []reconcile.Move) error {
	seen := make(map[string]bool, len(moves))
	for _, mv := range moves {
		id := mv.From.ID
		leaseless := mv.Leaseless()
		switch {
		case id == "" || mv.To.ID != id:
			return fmt.Errorf("a move from purchase %q writes purchase %q", id, mv.To.ID)
		case seen[id]:
			return fmt.Errorf("purchase %s is moved twice in one batch", id)
		case leaseless && mv.Job != reconcile.JobKeep:
			// Without a lease the job may be another worker's: only its
			// lease holder may complete or reschedule it.
			return fmt.Errorf("purchase %s: a move without a lease must leave the job alone", id)
		case leaseless && (mv.Lease.PurchaseID != "" && mv.Lease.PurchaseID != id || mv.Lease.Kind == reconcile.JobRefund):
			return fmt.Errorf("the move of purchase %s names job %q without its lease", id, mv.Lease.JobID())
		case !leaseless && (mv.Lease.PurchaseID != id || mv.Lease.Kind == reconcile.JobRefund):
			return fmt.Errorf("the move of purchase %s is fenced by the lease of job %q", id, mv.Lease.JobID())
		case (mv.From.State != mv.To.State) != (mv.Transition != nil):
			return fmt.Errorf("purchase %s: %s -> %s needs a transition exactly when the state changes", id, mv.From.State, mv.To.State)
		case mv.Transition != nil && (mv.Transition.PurchaseID != id || mv.Transition.From != mv.From.State || mv.Transition.To != mv.To.State):
			return fmt.Errorf("purchase %s: the transition recorded (%s -> %s) is not the move (%s -> %s)", id, mv.Transition.From, mv.Transition.To, mv.From.State, mv.To.State)
		case mv.Transition != nil && mv.Transition.RefundID != "":
			return fmt.Errorf("purchase %s: the transition recorded is of refund %s", id, mv.Transition.RefundID)
		case mv.Transition != nil && mv.Transition.DisputeID != "":
			return fmt.Errorf("purchase %s: the transition recorded is of dispute %s", id, mv.Transition.DisputeID)
		case mv.Attempt != nil && mv.Attempt.PurchaseID != id:
			return fmt.Errorf("purchase %s: the attempt recorded is of purchase %q", id, mv.Attempt.PurchaseID)
		case mv.Attempt != nil && mv.Attempt.RefundID != "":
			return fmt.Errorf("purchase %s: the attempt recorded is of refund %s", id, mv.Attempt.RefundID)
		case mv.Job != reconcile.JobKeep && mv.RunAt.IsZero():
			return fmt.Errorf("purchase %s: a job completed or rescheduled needs a time", id)
		}
		seen[id] = true
	}
	return nil
}

// AppliedOf reports, for each move, whether its purchase is among moved.
func AppliedOf(moves []reconcile.Move, moved []string) []bool {
	in := make(map[string]bool, len(moved))
	for _, id := range moved {
		in[id] = true
	}
	applied := make([]bool, len(moves))
	for i, mv := range moves {
		applied[i] = in[mv.From.ID]
	}
	return applied
}

// CheckKeyedPurchases refuses what InsertKeyedPurchases cannot store, so
// that both stores refuse it alike before writing anything: two items
// with one (Client, Key), an empty key, a key that does not name its
// item's purchase, a zero time, and a purchase that
// is not new (a provider field, an escalation or a settlement set): the
// set-based insert writes a new purchase's columns only.
func (d Dialect) CheckKeyedPurchases(what string, items []reconcile.KeyedPurchase) error {
	type pair struct{ client, key string }
	seen := make(map[pair]bool, len(items))
	for _, it := range items {
		k, p := it.Key, it.Purchase
		switch {
		case k.Key == "":
			return d.Invalid(what, "an empty idempotency key")
		case seen[pair{k.Client, k.Key}]:
			return d.Invalid(what, fmt.Sprintf("idempotency key %q of %q twice", k.Key, k.Client))
		case k.PurchaseID != p.ID:
			return d.Invalid(what, fmt.Sprintf("idempotency key %q names purchase %q, not its own %q", k.Key, k.PurchaseID, p.ID))
		case k.CreatedAt.IsZero() || p.CreatedAt.IsZero() || p.UpdatedAt.IsZero():
			return d.Invalid(what, "purchase "+p.ID+": a zero time")
		case p.ProviderKey != "" || p.ProviderRequest != nil || p.ParamsHash != "" || p.ProviderPaymentID != "" ||
			!p.FirstAttemptAt.IsZero() || !p.UncertainSince.IsZero() || !p.EscalatedAt.IsZero() ||
			p.EscalationReason != "" || !p.SettledAt.IsZero() || p.Doubt != "":
			return d.Invalid(what, "purchase "+p.ID+" is not new: it has provider, escalation or settlement fields")
		}
		seen[pair{k.Client, k.Key}] = true
	}
	return nil
}
