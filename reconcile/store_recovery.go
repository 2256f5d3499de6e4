package reconcile

import (
	"context"
	"time"
)

// RecoveryStore is the part of Tx that records recoveries after a
// restore from backup (their epochs and their guard's reads) and the
// identity of the database cluster. The stores' recovery.go implement
// it.
type RecoveryStore interface {
	// InsertRecovery stores a new recovery epoch (r.ID is ignored, and
	// CompletedAt must be zero) and returns its id. Returns ErrInvalid
	// for a zero RestoredAt, RecordedAt or audit window bound.
	InsertRecovery(ctx context.Context, r Recovery) (int64, error)
	// OpenRecovery returns the latest recorded epoch whose audit has not
	// completed, or ErrNotFound when there is none.
	OpenRecovery(ctx context.Context) (Recovery, error)
	// ListRecoveries returns up to limit epochs, latest recorded first
	// (0: no cap).
	ListRecoveries(ctx context.Context, limit int) ([]Recovery, error)
	// CompleteRecovery marks the open epoch id completed at at with its
	// counts. Returns ErrNotFound for an unknown id and ErrConflict for
	// one completed already.
	CompleteRecovery(ctx context.Context, id int64, relinked, orphans int, at time.Time) error
	// CountRecoveryHeld returns how many purchases and refunds not final
	// were created before cutoff: those a recovery guard holds back from
	// creates and replays.
	CountRecoveryHeld(ctx context.Context, cutoff time.Time) (purchases, refunds int, err error)
	// SendHorizon returns the time after which the provider created every
	// charge and refund of a purchase or refund the books show as created
	// or do not hold: the latest first attempt (first_attempt_at) of a
	// purchase or refund, or the latest recorded recovery epoch, whichever
	// is later; when the books record neither, the earliest created_at of
	// a purchase or refund; the zero time for empty books. No write but a
	// send (created → submitted) or a recovery moves it, so a purchase or
	// refund stored after a restore by a command that sends nothing does
	// not move it past the backup.
	SendHorizon(ctx context.Context) (time.Time, error)
	// SystemIdentifier returns the identifier of the database cluster
	// the store runs on now, and the one recorded by
	// RecordSystemIdentifier ("" if none was). A store that has no such
	// identifier (SQLite) returns an error wrapping errors.ErrUnsupported.
	SystemIdentifier(ctx context.Context) (current, recorded string, err error)
	// RecordSystemIdentifier records id as the cluster's identifier at
	// at, replacing what was recorded.
	RecordSystemIdentifier(ctx context.Context, id string, at time.Time) error
}
