package reconcile

import (
	"context"
	"time"
)

// JobStore is the part of Tx that writes and reads jobs and fences a
// transaction on its lease; Store claims them (ClaimJobs, ...). The
// stores' jobs.go implement both.
//
// The methods that take a job id take the purchase id of a purchase's
// job, the refund id of a refund's (ids are distinct by their prefixes).
type JobStore interface {
	// InsertJob creates a job, due at job.RunAt, not leased, never run: a
	// purchase's (Kind JobPurchase or empty) or a refund's (JobRefund,
	// with RefundID and its PurchaseID). Its kind, purchase and refund are
	// job's, its other fields are ignored. Returns ErrDuplicate if a job
	// with its id exists, ErrNotFound if its purchase does not exist or
	// its refund is not one of that purchase's, and ErrInvalid for another
	// kind, a refund's job without its RefundID, or a purchase's job
	// naming a refund.
	InsertJob(ctx context.Context, job Job) error
	// GetJob returns the job with id jobID, its Kind set, or ErrNotFound.
	GetJob(ctx context.Context, jobID string) (Job, error)

	// CheckLease returns nil if l is still its job's current lease (same
	// owner and token) and unexpired by the store's clock at this call
	// (not at the transaction's start), and locks the job row for the
	// rest of the transaction so that no claim can take it over before
	// commit. Returns ErrLeaseLost otherwise.
	CheckLease(ctx context.Context, l Lease) error

	// RescheduleJob releases the job's lease and makes it due at runAt;
	// a done job stays done. Call it after CheckLease (or for a job not
	// leased).
	RescheduleJob(ctx context.Context, jobID string, runAt time.Time) error

	// CompleteJob releases the job's lease and marks it done at now; a done
	// job is never claimed again, unless reopened.
	CompleteJob(ctx context.Context, jobID string, now time.Time) error

	// ReopenJob makes a job, done or not, not done and due at runAt
	// again. Its lease, if any, is left as it is (owner, token, expiry): a
	// live lease keeps its worker, and the job gets runAt for its next
	// run; an expired one is taken over by the next claim. For a settled
	// purchase whose final state a newer provider answer puts in doubt.
	// Returns ErrNotFound if there is no such job.
	ReopenJob(ctx context.Context, jobID string, runAt time.Time) error
}
