package events

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// SchemaVersion is the version of the wire format this package writes and
// the highest it reads. Receivers refuse an event of a higher version
// (ErrInvalidEvent): they could not know what it means.
const SchemaVersion = 1

// Type is an event's type: what happened. A receiver may see types it
// does not know (a newer sender); it should acknowledge them and do
// nothing.
type Type string

// The event types payrecon sends.
const (
	PurchaseSucceeded Type = "purchase.succeeded" // the purchase was charged
	PurchaseDeclined  Type = "purchase.declined"  // the provider refused the charge; final
	PurchaseEscalated Type = "purchase.escalated" // the purchase went to an operator
	PurchaseResolved  Type = "purchase.resolved"  // an operator resolved it
	RefundSucceeded   Type = "refund.succeeded"   // a refund reached its final, successful state
	RefundFailed      Type = "refund.failed"      // a refund reached its final, failed state
	FindingOpened     Type = "finding.opened"     // the audit opened a finding
	FindingClosed     Type = "finding.closed"     // the audit closed a finding
	DisputeOpened     Type = "dispute.opened"     // a cardholder disputed the purchase's payment
	DisputeWon        Type = "dispute.won"        // the dispute was decided for the merchant
	DisputeLost       Type = "dispute.lost"       // the dispute was decided for the cardholder: the money is gone
	DisputeClosed     Type = "dispute.closed"     // an inquiry closed with no chargeback, or the dispute was prevented
)

// Types lists every event type payrecon sends, in the order above.
var Types = []Type{
	PurchaseSucceeded, PurchaseDeclined, PurchaseEscalated, PurchaseResolved,
	RefundSucceeded, RefundFailed, FindingOpened, FindingClosed,
	DisputeOpened, DisputeWon, DisputeLost, DisputeClosed,
}

// Event is one event, as it travels in a delivery's body. Every field is
// fixed when the event is written to the outbox: a redelivery, a retry or
// a replay sends the same event, byte for byte; only the delivery headers
// (the signature's timestamp, the attempt number) change.
type Event struct {
	// ID identifies the event ("evt_" and 32 hex digits, see NewID). It
	// never changes; receivers deduplicate by it.
	ID string `json:"id"`
	// Type is what happened.
	Type Type `json:"type"`
	// SchemaVersion is the version of the wire format, 1 to SchemaVersion.
	SchemaVersion int `json:"schema_version"`
	// PurchaseID is the purchase the event is about ("pur_…").
	PurchaseID string `json:"purchase_id"`
	// RefundID is the refund the event is about, for refund events; else
	// empty and omitted.
	RefundID string `json:"refund_id,omitempty"`
	// Sequence numbers the purchase's events from 1, in the order they
	// were committed, within an epoch. A subscription that filters types
	// sees gaps. At most MaxSequence.
	Sequence int64 `json:"sequence"`
	// Epoch is the recovery epoch the event was committed in: 0 (and
	// omitted) until payrecon's books are first recovered from a backup,
	// then the Unix time, in seconds, at which the latest recovery was
	// recorded. Every recovery raises it. A restore brings the books'
	// sequence numbers back with the backup, so the first events after a
	// recovery may repeat numbers the receiver saw from the lost period:
	// events are ordered by (Epoch, Sequence), compared lexicographically
	// (see Order). At most MaxEpoch.
	Epoch int64 `json:"epoch,omitempty"`
	// CreatedAt is when the event was committed with its change (RFC 3339
	// on the wire).
	CreatedAt time.Time `json:"created_at"`
	// Data is the payload: a JSON object whose fields depend on Type.
	// Compact, as SetData writes it.
	Data json.RawMessage `json:"data"`
	// Digest is Digest(Data): the hex SHA-256 of the payload, compact.
	Digest string `json:"digest"`
}

// The bounds of an event's order (Order packs both in one int64).
const (
	// MaxSequence is the highest sequence an event may carry.
	MaxSequence = 1<<32 - 1
	// MaxEpoch is the highest epoch an event may carry.
	MaxEpoch = 1<<31 - 1
)

// Order returns e's place in its purchase's order as one number:
// Epoch<<32 + Sequence. Comparing orders compares (Epoch, Sequence)
// lexicographically; for an event of epoch 0 the order is its sequence.
// The receiver's tables store orders in their sequence columns.
func (e Event) Order() int64 { return e.Epoch<<32 | e.Sequence }

// SplitOrder is Order's inverse: the epoch and sequence of an order.
func SplitOrder(order int64) (epoch, sequence int64) { return order >> 32, order & MaxSequence }

// Errors about an event's content. Errors returned by Validate, Marshal,
// SetData and Receiver.Apply wrap one of them.
var (
	// ErrInvalidEvent: a required field is missing or out of range, the
	// schema version is unknown, or the payload is not JSON.
	ErrInvalidEvent = errors.New("events: invalid event")
	// ErrDigestMismatch: the digest is not the SHA-256 of the payload.
	ErrDigestMismatch = errors.New("events: digest does not match data")
)

// Digest returns the hex SHA-256 of data in compact form (json.Compact:
// insignificant whitespace removed, nothing else changed), the digest an
// Event carries. payrecon sends data compact, so it is also the SHA-256
// of data's bytes as they appear in the body. Returns an error wrapping
// ErrInvalidEvent if data is not valid JSON.
func Digest(data []byte) (string, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, data); err != nil {
		return "", fmt.Errorf("%w: data is not JSON: %w", ErrInvalidEvent, err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:]), nil
}

// SetData sets e's payload to v encoded as compact JSON (a json.RawMessage
// or []byte is taken as JSON already, and compacted), without HTML
// escaping, and sets e.Digest to match. It is the one way the sender
// should fill in a payload. Returns an error wrapping ErrInvalidEvent if v
// does not encode to a JSON object.
func (e *Event) SetData(v any) error {
	var raw []byte
	switch d := v.(type) {
	case json.RawMessage:
		raw = d
	case []byte:
		raw = d
	default:
		var err error
		if raw, err = encode(v); err != nil {
			return fmt.Errorf("%w: data: %w", ErrInvalidEvent, err)
		}
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return fmt.Errorf("%w: data is not JSON: %w", ErrInvalidEvent, err)
	}
	if buf.Len() == 0 || buf.Bytes()[0] != '{' {
		return fmt.Errorf("%w: data is not a JSON object", ErrInvalidEvent)
	}
	e.Data = json.RawMessage(buf.Bytes())
	sum := sha256.Sum256(e.Data)
	e.Digest = hex.EncodeToString(sum[:])
	return nil
}

// Validate checks that e is a well-formed event: ID, Type, PurchaseID
// set; SchemaVersion from 1 to SchemaVersion; Sequence from 1 to
// MaxSequence; Epoch from 0 to MaxEpoch; CreatedAt set; Data a JSON
// object; Digest the digest of Data. Returns an error wrapping
// ErrInvalidEvent or ErrDigestMismatch otherwise.
func (e Event) Validate() error {
	switch {
	case e.ID == "":
		return fmt.Errorf("%w: no id", ErrInvalidEvent)
	case e.Type == "":
		return fmt.Errorf("%w: event %s has no type", ErrInvalidEvent, e.ID)
	case e.SchemaVersion < 1 || e.SchemaVersion > SchemaVersion:
		return fmt.Errorf("%w: event %s has schema version %d; this receiver reads 1 to %d", ErrInvalidEvent, e.ID, e.SchemaVersion, SchemaVersion)
	case e.PurchaseID == "":
		return fmt.Errorf("%w: event %s has no purchase_id", ErrInvalidEvent, e.ID)
	case e.Sequence < 1:
		return fmt.Errorf("%w: event %s has sequence %d; sequences start at 1", ErrInvalidEvent, e.ID, e.Sequence)
	case e.Sequence > MaxSequence:
		return fmt.Errorf("%w: event %s has sequence %d; the highest is %d", ErrInvalidEvent, e.ID, e.Sequence, int64(MaxSequence))
	case e.Epoch < 0 || e.Epoch > MaxEpoch:
		return fmt.Errorf("%w: event %s has epoch %d; epochs are 0 to %d", ErrInvalidEvent, e.ID, e.Epoch, int64(MaxEpoch))
	case e.CreatedAt.IsZero():
		return fmt.Errorf("%w: event %s has no created_at", ErrInvalidEvent, e.ID)
	}
	trimmed := bytes.TrimSpace(e.Data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return fmt.Errorf("%w: event %s: data is not a JSON object", ErrInvalidEvent, e.ID)
	}
	digest, err := Digest(e.Data)
	if err != nil {
		return fmt.Errorf("event %s: %w", e.ID, err)
	}
	if digest != e.Digest {
		return fmt.Errorf("%w: event %s carries digest %q, its data's is %q", ErrDigestMismatch, e.ID, e.Digest, digest)
	}
	return nil
}

// Marshal returns e's wire form, the body of every delivery of e: JSON,
// fields in the order of Event, the payload compact and not HTML-escaped
// (so Digest holds over it as sent). It validates e first and returns an
// error wrapping ErrInvalidEvent or ErrDigestMismatch if e is not valid.
//
// The sender should store these bytes with the event and send them on
// every attempt, rather than marshal again from columns that may round
// CreatedAt differently.
func Marshal(e Event) ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	b, err := encode(e)
	if err != nil {
		return nil, fmt.Errorf("events: marshal event %s: %w", e.ID, err)
	}
	return b, nil
}

// Unmarshal parses a delivery's body into an Event and validates it.
// Fields it does not know are ignored (a newer sender may add some).
// Returns an error wrapping ErrInvalidEvent (not JSON, not an event,
// invalid) or ErrDigestMismatch.
func Unmarshal(body []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(body, &e); err != nil {
		return Event{}, fmt.Errorf("%w: body: %w", ErrInvalidEvent, err)
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// NewID returns a new random event id: "evt_" and 32 hex digits (128
// bits from crypto/rand).
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand.Read's contract)
	return "evt_" + hex.EncodeToString(b[:])
}

// encode is json.Marshal without HTML escaping and without the trailing
// newline of an Encoder.
func encode(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
