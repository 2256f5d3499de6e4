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

// The SQLSTATEs the schema's triggers raise (migrations/postgres; PR002,
// for writes to the append-only audit, the read-only transition tables
// and a refund's, a dispute's or a purchase's fixed columns, is never
// expected from this package and is left untranslated).
const (
	// codeForbiddenTransition: the state guard of purchases, refunds and
	// disputes.
	codeForbiddenTransition = "PR001"
	// codeRefundExceeds: the refunds of a payment would exceed its
	// amount (migration 00009).
	codeRefundExceeds = "PR003"
	// codeNotRefundable: the refund's purchase or finding does not allow
	// it (migration 00009).
	codeNotRefundable = "PR004"
	// codeDisputed: a dispute of the refund's payment forbids the refund
	// (migration 00017).
	codeDisputed = "PR005"
)

// constraintTransitionMove is the check of transitions that holds each
// row's (from_state, to_state) to its machine's table (migration 00009;
// before it, the foreign key transitions_move_fkey to
// allowed_transitions): a violation is a forbidden move, not a refused
// value.
const constraintTransitionMove = "transitions_move_check"

// refFKeys names what the foreign keys that do not refer to a purchase
// refer to: a violation of one of them is that row missing (a refund's
// row, or a refund's job, of a refund that is not the purchase's; a
// dispute's row of a dispute that is not). The foreign keys not in it
// refer to a purchase.
var refFKeys = map[string]string{
	"transitions_refund_fkey":       "refund",
	"provider_attempts_refund_fkey": "refund",
	"operator_actions_refund_fkey":  "refund",
	"jobs_refund_fkey":              "refund",
	"transitions_dispute_fkey":      "dispute",
}

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
		pgErr.Code == "23514" && pgErr.ConstraintName == constraintTransitionMove:
		return reconcile.ErrForbiddenTransition
	}
	switch pgErr.Code {
	case codeRefundExceeds:
		return reconcile.ErrRefundExceeds
	case codeNotRefundable:
		return reconcile.ErrNotRefundable
	case codeDisputed:
		return reconcile.ErrDisputed
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

// wrapRef is wrap for inserts of rows that refer to others: a foreign
// key violation means the row referred to does not exist, a purchase (or,
// by the foreign key's name, a refund of that purchase or a finding):
// reconcile.ErrNotFound.
func wrapRef(err error, format string, args ...any) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" {
		ref := refFKeys[pgErr.ConstraintName]
		if ref == "" {
			ref = "purchase"
		}
		return dialect.Missing(err, fmt.Sprintf(format, args...), ref)
	}
	return wrap(err, format, args...)
}
