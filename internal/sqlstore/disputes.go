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
