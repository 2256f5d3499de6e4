// Package sqlite implements reconcile.Store on SQLite, over database/sql
// with the pure-Go driver modernc.org/sqlite (driver name "sqlite", no
// cgo). It is the store for a single host: one database file, shared by
// every payrecon process on that host.
//
// # How SQLite differs, and how this package answers
//
// PostgreSQL lets many transactions write at once and hands claimers
// disjoint rows with FOR UPDATE SKIP LOCKED. SQLite has neither row locks
// nor SKIP LOCKED: it lets one writer at a time hold the database's write
// lock, and a transaction that starts as a reader and later tries to
// write can deadlock with another one doing the same (SQLITE_BUSY
// without waiting). The design follows from that:
//
//   - Every transaction is BEGIN IMMEDIATE (the driver's DSN parameter
//     _txlock=immediate): it takes the write lock up front, waiting for
//     it under the busy timeout, so no transaction ever has to upgrade a
//     read lock and two transactions can never deadlock. Reads inside a
//     transaction see a stable database, since nobody else writes until
//     it ends.
//   - A Store has exactly one connection (db.SetMaxOpenConns(1)), used
//     for reads and writes alike. Goroutines of one process queue for it
//     in database/sql instead of spinning in SQLite's busy handler;
//     processes sharing the file queue on the write lock under the busy
//     timeout. A caller waits at most Config.BusyTimeout for either and
//     then gets an error wrapping ErrLockTimeout (of kind
//     reconcile.KindUnavailable). (So a Store method called from inside
//     InTx, which needs the connection the transaction holds, fails
//     after the busy timeout instead of hanging.)
//   - Each connection runs with journal_mode=WAL (readers in other
//     processes do not block the writer, nor it them),
//     synchronous=Config.Synchronous (FULL by default: every commit is
//     synced to disk and survives a power loss; NORMAL syncs at WAL
//     checkpoints only, so a power loss or an OS crash can lose the last
//     commits, never corrupt the file), foreign_keys=ON and
//     busy_timeout=Config.BusyTimeout.
//   - ClaimJobs, under the write lock of its own transaction, selects the
//     due or expired jobs (ORDER BY run_at LIMIT n), noting which had an
//     unreleased lease (SQLite's RETURNING only gives the new values, so
//     the previous owner must be read first), then leases exactly those
//     with one UPDATE ... RETURNING. No other writer runs in between, so
//     two claimers, in one process or several, never get the same job.
//   - CheckLease is a plain SELECT: the transaction already holds the
//     write lock, so no claim can take the job over before it commits.
//   - InsertInboxEvent and InsertIdempotencyKey are INSERT ... ON
//     CONFLICT DO NOTHING. "A concurrent insert of the same key waits for
//     the other transaction" holds trivially: writers are serialized, so
//     the second transaction starts only after the first has committed
//     (it then reports false) or rolled back (true).
//   - AcquireSweepLock is one upsert, INSERT ... ON CONFLICT(name) DO
//     UPDATE ... WHERE expired or already the caller's ... RETURNING, as
//     on PostgreSQL.
//
// Since writers never collide, InTx never retries: fn runs once.
//
// # The clock
//
// The store owns the clock (Store.Now, Tx.Now): claims, lease checks,
// releases and sweep locks read it themselves, under the write lock.
// SQLite is embedded, so the database's clock is this machine's:
// time.Now by default, or Config.Now.
//
// # Guarantees in the database
//
// The schema lives in package migrations (dialect SQLite); Migrate
// applies it. Triggers refuse every write of purchases.state that is not
// in the allowed_transitions table (loaded with statemachine's moves),
// every write of refunds.state or disputes.state that is not in
// refund_allowed_transitions or dispute_allowed_transitions, every
// transition the audit records that is not in its machine's table, any
// change to those tables, any UPDATE or DELETE of the audit tables
// (transitions, provider_attempts, operator_actions), any change to an
// audit finding but its closing, and a refund its purchase or finding
// does not allow, that a dispute of its payment forbids, or that would
// take a payment's refunds (and lost disputes) past its amount
// (migrations 00008 and 00015; the single writer makes the check and the
// insert one), whatever SQL path writes. A
// refused write fails alone: RAISE(ABORT) and constraint failures undo
// the statement, not the transaction, so the caller may go on reading and
// writing and commit, as on PostgreSQL. Row triggers keep the number of
// purchases in each state in purchase_state_counts, one row per state,
// which CountByState reads instead of counting the purchases.
//
// Driver errors are translated into reconcile's errors and wrapped with
// %w, keeping SQLite's message: a unique constraint gives
// reconcile.ErrDuplicate, the transition triggers
// reconcile.ErrForbiddenTransition, the refunds' limits
// reconcile.ErrNotRefundable, reconcile.ErrRefundExceeds and
// reconcile.ErrDisputed, NOT NULL,
// CHECK, type and foreign key failures reconcile.ErrInvalid (a foreign
// key to a missing purchase, refund or dispute reconcile.ErrNotFound; a
// row's foreign keys to its purchase and its refund or dispute, which
// SQLite does not tell apart, are told apart by looking the purchase
// up), SQLITE_BUSY after
// the busy timeout ErrLockTimeout, which wraps reconcile.ErrUnavailable.
// These are the kinds reconcile/postgres gives the same failures.
//
// # Values
//
// Times are stored as INTEGER microseconds since the Unix epoch
// (time.Time.UnixMicro: finer digits are truncated, as PostgreSQL's
// timestamptz does) and returned in UTC; a zero time.Time is stored as
// NULL and a NULL read back as the zero time. Integers compare in the
// same order as the instants, so run_at <= now is an index range scan.
// Empty optional strings (reference, provider key, payment id, ...) are
// stored as NULL, so they never collide in unique indexes. Byte slices
// (payloads, responses) are BLOBs; an empty one reads back as nil.
//
// # Files
//
// Files and methods come in the same order as reconcile/postgres's, so that
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
//   - errors.go: the dialect's name, ErrLockTimeout, and the driver's
//     errors as reconcile's kinds (kindOf, wrap, wrapRef).
//   - values.go: times as the database keeps them.
//
// What the two stores say alike (the shape of their errors, the checks
// of inputs, the explanations of a conflict or a lost lease, NULL
// strings, the provider request's JSON) is internal/sqlstore's; what is
// left here is this dialect's SQL and its own parts.
package sqlite
