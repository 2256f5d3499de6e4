package sqlite

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
)

// dialect names this store in its errors.
const dialect sqlstore.Dialect = "sqlite"

// ErrLockTimeout is wrapped by the errors of calls that waited
// Config.BusyTimeout for the database without getting it: another
// transaction, in this process or another one, kept the write lock all
// that time. It wraps reconcile.ErrUnavailable, so that
// reconcile.KindOf classifies it as reconcile.KindUnavailable: retry
// later. (It is not reconcile.ErrBusy, which says that a worker holds a
// purchase's job.)
var ErrLockTimeout error = lockTimeout{}

// lockTimeout is ErrLockTimeout's type: its own message, and
// reconcile.ErrUnavailable as its cause.
type lockTimeout struct{}

func (lockTimeout) Error() string {
	return "database is busy: another transaction held it for longer than the busy timeout"
}

func (lockTimeout) Unwrap() error { return reconcile.ErrUnavailable }

// The messages of the schema's triggers (migrations/sqlite) that this
// package translates. The append-only and read-only triggers' messages
// ("<table> is append-only: ...", "... is read-only: ...", "refunds: ...
// fixed at insert ...", "disputes: ... fixed at insert ...", "purchases:
// ... fixed at insert ...") are never expected from this package and are
// left untranslated.
const (
	// forbiddenMessage starts the message of every RAISE by the state
	// guards of purchases, refunds and disputes and the audit's move check.
	forbiddenMessage = "forbidden transition"
	// notRefundableMessage: the refund's purchase or finding does not
	// allow it (migration 00008).
	notRefundableMessage = "not refundable:"
	// refundExceedsMessage: the refunds of a payment would exceed its
	// amount (migration 00008).
	refundExceedsMessage = "refund exceeds the payment:"
	// disputedMessage: a dispute of the refund's payment forbids the
	// refund (migration 00015).
	disputedMessage = "payment disputed:"
	// outboxExistsMessage: an insert of an outbox event whose id exists
	// (migration 00010 refuses it before the conflict, so that REPLACE
	// cannot change the event's bytes): a duplicate.
	outboxExistsMessage = "is immutable: REPLACE refused"
)

// kindOf returns the error a driver error stands for (one of reconcile's,
// or ErrLockTimeout), or nil. The driver reports extended result codes.
// It maps the same failures to the same kinds as reconcile/postgres's:
// the transition guard to ErrForbiddenTransition, the refunds' limits to
// ErrNotRefundable, ErrRefundExceeds and ErrDisputed, a unique key to
// ErrDuplicate, a refused value to ErrInvalid, and the write lock not
// granted in time to ErrLockTimeout (reconcile.ErrUnavailable).
func kindOf(err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return nil
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_TRIGGER:
		switch msg := se.Error(); {
		case strings.Contains(msg, forbiddenMessage):
			return reconcile.ErrForbiddenTransition
		case strings.Contains(msg, notRefundableMessage):
			return reconcile.ErrNotRefundable
		case strings.Contains(msg, refundExceedsMessage):
			return reconcile.ErrRefundExceeds
		case strings.Contains(msg, disputedMessage):
			return reconcile.ErrDisputed
		case strings.Contains(msg, outboxExistsMessage):
			return reconcile.ErrDuplicate
		}
		return nil
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return reconcile.ErrDuplicate
	case sqlite3.SQLITE_CONSTRAINT_NOTNULL,
		sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY,
		sqlite3.SQLITE_CONSTRAINT_CHECK,
		sqlite3.SQLITE_CONSTRAINT_DATATYPE: // a value of the wrong type in a STRICT table
		return reconcile.ErrInvalid
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY:
		return ErrLockTimeout
	case sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_MISMATCH:
		return reconcile.ErrInvalid
	}
	return nil
}

// wrap adds "sqlite: <what>: " to err and, when err is a driver error
// with a meaning in package reconcile, that error too, keeping SQLite's
// message: "sqlite: update purchase pur_1 (created -> succeeded):
// forbidden transition: constraint failed: forbidden transition created
// -> succeeded (purchase pur_1) (1811)".
func wrap(err error, format string, args ...any) error {
	return dialect.Wrap(err, kindOf(err), fmt.Sprintf(format, args...))
}

// wrapRef is wrap for inserts whose only foreign key is the purchase (or
// whose other foreign keys the caller ruled out): a foreign key violation
// means the purchase does not exist.
func wrapRef(err error, format string, args ...any) error {
	if isForeignKey(err) {
		return dialect.MissingPurchase(err, fmt.Sprintf(format, args...))
	}
	return wrap(err, format, args...)
}

// wrapAuditRef is wrapRef for rows that may refer to a refund or a
// dispute (ref, "refund" or "dispute", with id refID) of their purchase
// too (the audit's, a refund's job): SQLite does not say which foreign
// key failed, so on that failure path only it looks the purchase up:
// when it exists, the refund or dispute (or it as the purchase's) is
// what is missing.
func (t *txn) wrapAuditRef(ctx context.Context, err error, purchaseID, ref, refID, format string, args ...any) error {
	if refID != "" && isForeignKey(err) {
		var found bool
		lerr := t.tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM purchases WHERE id = ?1)`, purchaseID).Scan(&found)
		switch {
		case lerr != nil:
			return wrap(errors.Join(err, lerr), format, args...)
		case found:
			return dialect.Missing(err, fmt.Sprintf(format, args...), ref)
		}
	}
	return wrapRef(err, format, args...)
}

// isForeignKey reports whether err is a foreign key violation. SQLite
// does not say which foreign key failed.
func isForeignKey(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}
