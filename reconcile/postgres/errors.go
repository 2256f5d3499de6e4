package postgres

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/reconcile"
)

// dialect names this store in its errors.
const dialect sqlstore.Dialect = "postgres"

// codeForbiddenTransition is the SQLSTATE the schema's state trigger
// raises (migrations/postgres; PR002, for writes to the append-only
// audit and the read-only transition table, is never expected from this
// package and is left untranslated).
const codeForbiddenTransition = "PR001"

// constraintTransitionMove is the foreign key of transitions (from_state,
// to_state) to allowed_transitions (migration 00004): a violation is a
// forbidden move, not a missing row.
const constraintTransitionMove = "transitions_move_fkey"

// kindOf returns the reconcile error a database error stands for, or nil.
// It maps the same failures to the same kinds as reconcile/sqlite's:
// the transition guard to ErrForbiddenTransition, a unique key to
// ErrDuplicate, a refused value to ErrInvalid, and a lock not granted in
// time (lock_timeout, the counterpart of SQLite's busy timeout) to
// ErrUnavailable.
func kindOf(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return nil
	}
	switch {
	case pgErr.Code == codeForbiddenTransition,
		pgErr.Code == "23503" && pgErr.ConstraintName == constraintTransitionMove:
		return reconcile.ErrForbiddenTransition
	}
	switch pgErr.Code {
	case "23505": // unique_violation
		return reconcile.ErrDuplicate
	case "23502", // not_null_violation
		"23503", // foreign_key_violation
		"23514", // check_violation
		"22P02", // invalid_text_representation
		"22001", // string_data_right_truncation
		"22003": // numeric_value_out_of_range
		return reconcile.ErrInvalid
	case "55P03": // lock_not_available
		return reconcile.ErrUnavailable
	}
	return nil
}

// wrap adds "postgres: <what>: " to err and, when err is a database error
// with a meaning in package reconcile, that error too, keeping the
// database's message: "postgres: update purchase pur_1: forbidden
// transition: ERROR: forbidden transition succeeded -> uncertain ...".
func wrap(err error, format string, args ...any) error {
	return dialect.Wrap(err, kindOf(err), fmt.Sprintf(format, args...))
}

// wrapRef is wrap for inserts whose foreign key is the purchase: a
// violation of a foreign key but transitions_move_fkey (which is a
// forbidden move) means the purchase does not exist.
func wrapRef(err error, format string, args ...any) error {
	if isPurchaseRef(err) {
		return dialect.MissingPurchase(err, fmt.Sprintf(format, args...))
	}
	return wrap(err, format, args...)
}

// isPurchaseRef reports whether err is a violation of a foreign key to
// the purchase: any foreign key but transitions_move_fkey.
func isPurchaseRef(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23503" && pgErr.ConstraintName != constraintTransitionMove
}
