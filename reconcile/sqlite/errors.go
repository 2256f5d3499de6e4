package sqlite

import (
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

// forbiddenMessage starts the message of every RAISE by the schema's
// state triggers (migrations/sqlite). The append-only triggers' messages
// ("<table> is append-only: ...") are never expected from this package
// and are left untranslated.
const forbiddenMessage = "forbidden transition"

// kindOf returns the error a driver error stands for (one of reconcile's,
// or ErrLockTimeout), or nil. The driver reports extended result codes.
// It maps the same failures to the same kinds as reconcile/postgres's:
// the transition guard to ErrForbiddenTransition, a unique key to
// ErrDuplicate, a refused value to ErrInvalid, and the write lock not
// granted in time to ErrLockTimeout (reconcile.ErrUnavailable).
func kindOf(err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return nil
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_TRIGGER:
		if strings.Contains(se.Error(), forbiddenMessage) {
			return reconcile.ErrForbiddenTransition
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

// isForeignKey reports whether err is a foreign key violation. SQLite
// does not say which foreign key failed.
func isForeignKey(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY
}
