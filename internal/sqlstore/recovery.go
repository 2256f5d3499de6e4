package sqlstore

import (
	"github.com/payrecon/payrecon/reconcile"
)

// CheckNewRecovery is the validation both stores run before
// InsertRecovery: every time set, a window in order, not completed yet.
func (d Dialect) CheckNewRecovery(what string, r reconcile.Recovery) error {
	switch {
	case r.RestoredAt.IsZero() || r.RecordedAt.IsZero() || r.AuditFrom.IsZero() || r.AuditUntil.IsZero():
		return d.Invalid(what, "restored_at, recorded_at and the audit window must be set")
	case r.AuditUntil.Before(r.AuditFrom):
		return d.Invalid(what, "the audit window ends before it starts")
	case !r.CompletedAt.IsZero():
		return d.Invalid(what, "a new epoch is not completed")
	}
	return nil
}

// RecoveryColumns are the columns of recovery_epochs, in the order the
// stores scan them.
const RecoveryColumns = `id, restored_at, recorded_at, audit_from, audit_until, completed_at, relinked, orphans`

// SystemIdentifierName is the payrecon_instance row of the cluster's
// system identifier.
const SystemIdentifierName = "system_identifier"
