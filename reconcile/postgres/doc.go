// Package postgres implements reconcile.Store on PostgreSQL, over pgx/v5.
//
// The schema lives in package migrations (dialect Postgres); Migrate
// applies it. The database itself refuses forbidden state moves (a
// trigger checks every write of purchases.state against the
// allowed_transitions table, others every write of refunds.state and
// disputes.state against refund_allowed_transitions and
// dispute_allowed_transitions, and a check every transition the audit
// records against its machine's table), any change to those tables, any
// UPDATE or DELETE of the audit tables, any change to an audit finding
// but its closing, and a refund its purchase or finding does not allow,
// that a dispute of its payment forbids, or that would take a payment's
// refunds (and lost disputes) past its amount (a trigger that serializes
// the inserts of one payment's refunds on an advisory lock, migrations
// 00009 and 00017), so the guarantees hold for every SQL path, not only
// this package. For
// the same reason the number of purchases in each state is kept by the
// database: statement-level triggers on purchases add each statement's
// per-state deltas to purchase_state_counts, sharded so that concurrent
// writers do not wait for each other (see migration 00007), and
// CountByState sums the shards instead of counting the purchases.
//
// Driver errors are translated into reconcile's errors and wrapped with
// %w, keeping the database's own message: errors.Is(err,
// reconcile.ErrForbiddenTransition) works, and the text still says which
// move was refused. The same failures give the same kinds as on SQLite
// (see kindOf); a lock not granted within lock_timeout, the counterpart
// of SQLite's busy timeout, gives reconcile.ErrUnavailable.
//
// Every write inside a transaction runs under a savepoint, so a refused
// write (a duplicate, a forbidden move) leaves the transaction usable, as
// it is on SQLite: the caller may go on reading and writing and commit.
// Tx.Savepoint nests a caller's whole function the same way.
//
// The store owns the clock (Store.Now, Tx.Now): by default the database
// server's, statement_timestamp(), which every worker and replica shares,
// so a worker whose own clock is off changes no decision. Claims, lease
// checks, releases and sweep locks read it in their own statement, in
// the same round trip; Config.Now injects another clock.
//
// Times are stored as timestamptz to the microsecond (finer digits are
// truncated) and returned in UTC; a zero time.Time is stored as NULL and a
// NULL read back as the zero time. Empty optional strings (reference,
// provider key, payment id, ...) are stored as NULL, so they never collide
// in unique indexes.
//
// # Files
//
// Files and methods come in the same order as reconcile/sqlite's, so that
// the two stores can be read side by side:
//
//   - doc.go: this comment.
//   - store.go: Config, Store, Open, Migrate, Ready, Close, InTx; the Tx
//     (txn) and its statements (exec, Savepoint, execOne, queryOne,
//     queryAll); Now.
//   - purchases.go: InsertPurchase, GetPurchase, FindPurchaseByPaymentID,
//     FindPurchaseByReference, UpdatePurchase, ListEscalated,
//     CountByState, CountEscalated, CountEscalatedByAccount,
//     OldestUncertainSince, ListOverdueUncertain, ListSubmittedBetween,
//     ListSucceededWithoutPayment, scanPurchase.
//   - accounts.go: ListAccounts.
//   - audit_trail.go: InsertTransition, ListTransitions,
//     ListRefundTransitions, ListDisputeTransitions, InsertAttempt,
//     ListAttempts, ListRefundAttempts.
//   - jobs.go: ClaimJobs, ClaimExpiredJobs, ClaimJob, claim,
//     ReleaseLeases, InsertJob, GetJob, CheckLease, RescheduleJob,
//     CompleteJob, ReopenJob, scanJob. A job is a purchase's or a
//     refund's (its kind), keyed by its id: the purchase id or the refund
//     id.
//   - moves.go: FindPurchases, ApplyMoves.
//   - refunds.go: InsertRefund, GetRefund, ListRefunds, FindRefunds,
//     UpdateRefund, ListEscalatedRefunds, ListOverdueUncertainRefunds,
//     CountRefundsByState, OldestUncertainRefundSince, scanRefund.
//   - disputes.go: InsertDispute, GetDispute, FindDispute, ListDisputes,
//     UpdateDispute, ListOpenDisputes, scanDispute.
//   - inbox.go: InsertInboxEvent, InsertInboxEvents, ReceiveInboxEvents,
//     GetInboxEvent, UpdateInboxEvent, UpdateInboxEvents, ListInboxEvents,
//     ListUnmatchedEvents, DeleteInboxEventsBefore, scanInboxEvent.
//   - idempotency_keys.go: InsertIdempotencyKey, GetIdempotencyKey,
//     SaveIdempotencyResponse, DeleteIdempotencyKeysBefore,
//     scanIdempotencyKey.
//   - operator_actions.go: InsertOperatorAction, ListOperatorActions.
//   - sweep_locks.go: AcquireSweepLock, ReleaseSweepLock.
//   - findings.go: InsertFinding, GetFinding, ListFindings, CloseFinding,
//     CountOpenFindings, LinkAuditPayment, GetAuditRun, SaveAuditRun,
//     scanFinding, scanAuditRun.
//   - errors.go: the dialect's name, and its driver's errors as
//     reconcile's kinds (kindOf, wrap, wrapRef).
//   - values.go: times, and JSON documents, as the database keeps them.
//
// What the two stores say alike (the shape of their errors, the checks
// of inputs, the explanations of a conflict or a lost lease, NULL
// strings, the provider request's JSON) is internal/sqlstore's; what is
// left here is this dialect's SQL and its own parts.
package postgres
