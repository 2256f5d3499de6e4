package sqlstore

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/payrecon/payrecon/provider"
)

// DisputeColumns are the columns of disputes, in the order both stores
// write and scan them.
const DisputeColumns = `id, provider_dispute_id, purchase_id, payment_id, amount, currency, reason,
    state, version, provider_status, inquiry, evidence_due_by, charge_refundable, withdrawn, reinstated,
    provider_updated_at, created_at, updated_at, closed_at`

// EncodeDispute returns an inbox event's dispute as the stores keep it,
// JSON (PostgreSQL's jsonb, SQLite's TEXT), or nil for none (NULL). Its
// times are kept as every stored time is: in UTC, to the microsecond.
func EncodeDispute(d *provider.Dispute) ([]byte, error) {
	if d == nil {
		return nil, nil
	}
	c := *d
	c.EvidenceDueBy, c.Created = storedTime(c.EvidenceDueBy), storedTime(c.Created)
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, fmt.Errorf("encode dispute %s: %w", d.ID, err)
	}
	return b, nil
}

// DecodeDispute is EncodeDispute's inverse: nil (NULL) is no dispute.
// The times come back in UTC, the zero time as the zero time.
func DecodeDispute(b []byte) (*provider.Dispute, error) {
	if b == nil {
		return nil, nil
	}
	d := new(provider.Dispute)
	if err := json.Unmarshal(b, d); err != nil {
		return nil, fmt.Errorf("decode dispute: %w", err)
	}
	d.EvidenceDueBy, d.Created = storedTime(d.EvidenceDueBy), storedTime(d.Created)
	return d, nil
}

// storedTime is t as a store returns it: truncated to the microsecond,
// in UTC; the zero time stays zero (and in UTC, as the zero value is).
func storedTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.Truncate(time.Microsecond).UTC()
}

// AccountOfPurchase is the SQL expression, for both stores, of the
// provider account of the purchase whose id is in column ("disputes.purchase_id"):
// ” when there is no such purchase (a NULL column). The reads of
// findings and disputes select it as their Account.
func AccountOfPurchase(column string) string {
	return `COALESCE((SELECT pa.account FROM purchases pa WHERE pa.id = ` + column + `), '')`
}

// PurchaseOfAccount is the SQL condition, for both stores, that the
// purchase whose id is in column is of the account in placeholder
// ("$1", "?1"): false when there is no such purchase. It is a scalar
// subquery, not EXISTS, so that neither planner turns it into a join
// that reads every purchase of the account: the operator lists' rows
// are few, and each probes the purchases' primary key.
func PurchaseOfAccount(column, placeholder string) string {
	return `(SELECT pa.account FROM purchases pa WHERE pa.id = ` + column + `) = ` + placeholder
}
