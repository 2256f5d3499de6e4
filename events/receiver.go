package events

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// DefaultMaxBodyBytes bounds a delivery's body unless configured
// otherwise: 1 MiB.
const DefaultMaxBodyBytes = 1 << 20

// DefaultConsumer is the consumer name the receiver's rows carry unless
// configured otherwise.
const DefaultConsumer = "default"

// Effect is what the shop does with an event, in the transaction that
// records the event in the inbox: grant access, record a refund, open a
// ticket. It must do all its work through tx (never through another
// connection, nor by calling out to another system, whose effects a
// rollback cannot undo) and should absorb a repeat of a business fact
// under its own key (a UNIQUE constraint and ON CONFLICT DO NOTHING), not
// fail on it. It runs once for each new event, unless it fails: an error
// rolls back the transaction, the inbox row with it, and the sender
// retries. It should ignore types it does not know. It is never called
// for a duplicate, a conflict or an event out of order.
type Effect func(ctx context.Context, tx *sql.Tx, ev Event) error

// Config configures a Receiver. The zero value of every field but DB,
// Dialect and Secrets is a documented default.
type Config struct {
	// DB is the shop's database: the receiver's tables (see Schema) live
	// there, beside the tables the Effect writes, so that the inbox row
	// and the effect commit together. Required.
	DB *sql.DB
	// Dialect is DB's SQL dialect, Postgres or SQLite. Required.
	Dialect Dialect
	// Secrets are the subscription's signing secrets. A delivery signed
	// with any of them is accepted: while rotating, list the new one and
	// the old one, and drop the old one once payrecon signs with the new.
	// At least one non-empty secret is required. Never logged.
	Secrets []string
	// Tolerance is how far a signature's timestamp may be from Now, either
	// way. Default DefaultTolerance (5 minutes).
	Tolerance time.Duration
	// Now is the receiver's clock, for the signature's tolerance and the
	// received_at column. Default time.Now.
	Now func() time.Time
	// Consumer names this receiver in its tables' keys, so that several
	// receivers of the same events (say, access and email) can share the
	// tables and each see every event once. Default DefaultConsumer.
	Consumer string
	// InboxTable and SequenceTable name the receiver's tables, optionally
	// schema-qualified. Default DefaultInboxTable and
	// DefaultSequenceTable.
	InboxTable, SequenceTable string
	// OnGap, if set, is called when an event is applied whose sequence is
	// more than one above the highest its purchase had in the same epoch
	// (last; 0 for a purchase not seen before): events were skipped, which
	// is legitimate when the subscription filters types. The first event
	// of a higher epoch is no gap, whatever its sequence. It is called after the event's
	// transaction committed, once per applied event, never for a
	// duplicate. Default: the gap is only logged.
	OnGap func(ctx context.Context, ev Event, last int64)
	// Logger receives a line per refused delivery, duplicate, conflict,
	// gap or failed effect (applied events at Debug). Default
	// slog.Default().
	Logger *slog.Logger
	// MaxBodyBytes bounds a delivery's body; a larger one is refused with
	// 413. Default DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
}

// Outcome is what became of an event the receiver accepted.
type Outcome string

// The outcomes of Apply, also the "outcome" of a 200 answer's body.
const (
	// Applied: the event was new; its inbox row, its purchase's sequence
	// and the effect committed together.
	Applied Outcome = "applied"
	// Duplicate: the event (same id, same content) was applied before;
	// nothing was done.
	Duplicate Outcome = "duplicate"
	// Stale: the event is new, but of an older epoch than an event its
	// purchase already had applied: it was committed before a recovery
	// of payrecon's books, and what the books emitted since supersedes
	// it. Its id was recorded (a repeat is a Duplicate) and nothing else
	// was done: the effect did not run.
	Stale Outcome = "stale"
)

// Errors of Apply besides those of Validate. Each is answered 409: the
// delivery will not be accepted however often it is retried.
var (
	// ErrConflict: an event with this id but another content (type,
	// schema version, purchase, refund, sequence or digest) was applied
	// before. Nothing was applied. The sender is at fault.
	ErrConflict = errors.New("events: conflict: the event id was applied with another content")
	// ErrOutOfOrder: the event is new and of the epoch of the highest
	// event applied for its purchase, but its sequence is not above that
	// event's: it arrived after a later event, or replays an old one
	// under a new id. Nothing was applied.
	ErrOutOfOrder = errors.New("events: out of order: the sequence is not above the purchase's highest")
)

// Receiver receives payrecon's event deliveries: an http.Handler for the
// subscription's URL, and Apply for events that arrive another way. Each
// event is applied at most once per consumer: its id is inserted into the
// inbox table first, in the transaction that runs the shop's Effect, and
// the table's primary key decides between concurrent deliveries. Create it
// with NewReceiver. Safe for concurrent use.
type Receiver struct {
	db        *sql.DB
	dialect   Dialect
	secrets   []string
	tolerance time.Duration
	now       func() time.Time
	consumer  string
	onGap     func(context.Context, Event, int64)
	log       *slog.Logger
	maxBody   int64
	effect    Effect

	insertInbox, selectInbox, lockSequence, updateSequence string
}

// NewReceiver returns a Receiver for cfg that applies each new event with
// effect. It does not touch the database: run Migrate (or Schema's DDL)
// first. Returns an error if DB or effect is nil, no secret is set, the
// dialect or a table name is invalid, or Tolerance or MaxBodyBytes is
// negative.
func NewReceiver(cfg Config, effect Effect) (*Receiver, error) {
	t, err := resolveTables(cfg)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.DB == nil:
		return nil, errors.New("events: Config.DB is nil")
	case effect == nil:
		return nil, errors.New("events: no effect")
	case countNonEmpty(cfg.Secrets) == 0:
		return nil, errors.New("events: Config.Secrets has no secret")
	case cfg.Tolerance < 0:
		return nil, fmt.Errorf("events: Config.Tolerance is negative (%s)", cfg.Tolerance)
	case cfg.MaxBodyBytes < 0:
		return nil, fmt.Errorf("events: Config.MaxBodyBytes is negative (%d)", cfg.MaxBodyBytes)
	}
	r := &Receiver{
		db:        cfg.DB,
		dialect:   t.dialect,
		secrets:   append([]string(nil), cfg.Secrets...),
		tolerance: cfg.Tolerance,
		now:       cfg.Now,
		consumer:  cfg.Consumer,
		onGap:     cfg.OnGap,
		log:       cfg.Logger,
		maxBody:   cfg.MaxBodyBytes,
		effect:    effect,
	}
	if r.tolerance == 0 {
		r.tolerance = DefaultTolerance
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.consumer == "" {
		r.consumer = DefaultConsumer
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.maxBody == 0 {
		r.maxBody = DefaultMaxBodyBytes
	}
	d := t.dialect
	r.insertInbox = d.rebind(`INSERT INTO ` + t.inbox + ` (consumer, event_id, event_type, schema_version, purchase_id, refund_id, sequence, digest, created_at, received_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (consumer, event_id) DO NOTHING`)
	r.selectInbox = d.rebind(`SELECT event_type, schema_version, purchase_id, refund_id, sequence, digest
		FROM ` + t.inbox + ` WHERE consumer = ? AND event_id = ?`)
	// An upsert that changes nothing, for the row lock it takes
	// (PostgreSQL; SQLite has the one write lock already) and the value
	// it returns: the highest order applied (Event.Order: the sequence
	// for epoch 0), 0 for a new purchase.
	r.lockSequence = d.rebind(`INSERT INTO ` + t.sequence + ` AS s (consumer, purchase_id, last_sequence, last_event_id, updated_at)
		VALUES (?, ?, 0, '', ?)
		ON CONFLICT (consumer, purchase_id) DO UPDATE SET last_sequence = s.last_sequence
		RETURNING last_sequence`)
	r.updateSequence = d.rebind(`UPDATE ` + t.sequence + ` SET last_sequence = ?, last_event_id = ?, updated_at = ?
		WHERE consumer = ? AND purchase_id = ?`)
	return r, nil
}

// Apply applies ev once: in one transaction of the shop's database, it
// inserts ev's id into the inbox (the primary key decides whether it is
// new; nothing is read first), and if it is new, checks ev's order
// (epoch, sequence) against the highest its purchase had, records it,
// runs the effect, and commits. Within an epoch the order is strict: the
// sequence must be above the highest applied. An event of a higher epoch
// than the highest applied is accepted whatever its sequence (a recovery
// of payrecon's books starts a new epoch, and its numbering goes on from
// the restored backup's). An event of a lower epoch is stale. It returns
//
//   - Applied, nil: the event was new and its effect committed; if its
//     sequence skipped some within its epoch, OnGap was called after the
//     commit;
//   - Duplicate, nil: the same event was applied before; nothing was done;
//   - Stale, nil: the event is new but of an older epoch than the highest
//     applied for its purchase: its id was recorded, the effect did not
//     run (see Stale);
//   - an error wrapping ErrInvalidEvent or ErrDigestMismatch (Validate),
//     ErrConflict or ErrOutOfOrder: nothing was done, and a retry will be
//     refused the same way;
//   - another error (the effect's, wrapped, or the database's): the
//     transaction was rolled back; a retry may succeed. An error from
//     Commit is ambiguous, the commit may have happened: a retry is then a
//     Duplicate.
//
// Safe for concurrent use, also with the same event: one call applies it
// and the others, which wait on its inbox row, return Duplicate once it
// commits; if it rolls back instead, one of them applies the event.
func (r *Receiver) Apply(ctx context.Context, ev Event) (Outcome, error) {
	return r.apply(ctx, ev, r.log)
}

// apply is Apply logging to log (which may carry the delivery's details).
func (r *Receiver) apply(ctx context.Context, ev Event, log *slog.Logger) (Outcome, error) {
	if err := ev.Validate(); err != nil {
		return "", err
	}
	log = log.With(slog.String("event_id", ev.ID), slog.String("type", string(ev.Type)),
		slog.String("purchase_id", ev.PurchaseID), slog.Int64("sequence", ev.Sequence), slog.String("consumer", r.consumer))
	now := r.now()

	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("events: begin for %s: %w", ev.ID, err)
	}
	defer tx.Rollback() // a no-op after Commit

	order := ev.Order()
	res, err := tx.ExecContext(ctx, r.insertInbox, r.consumer, ev.ID, string(ev.Type), ev.SchemaVersion,
		ev.PurchaseID, ev.RefundID, order, ev.Digest, r.dialect.timeArg(ev.CreatedAt), r.dialect.timeArg(now))
	if err != nil {
		return "", fmt.Errorf("events: insert %s into the inbox: %w", ev.ID, err)
	}
	inserted, err := res.RowsAffected()
	if err != nil {
		return "", fmt.Errorf("events: insert %s into the inbox: %w", ev.ID, err)
	}
	if inserted == 0 {
		return r.repeat(ctx, tx, ev, log)
	}

	var last int64
	if err := tx.QueryRowContext(ctx, r.lockSequence, r.consumer, ev.PurchaseID, r.dialect.timeArg(now)).Scan(&last); err != nil {
		return "", fmt.Errorf("events: read the sequence of %s for %s: %w", ev.PurchaseID, ev.ID, err)
	}
	lastEpoch, lastSeq := SplitOrder(last)
	switch {
	case order > last:
	case ev.Epoch < lastEpoch:
		// Committed before a recovery whose events the purchase has had:
		// superseded. Keep the id, so that a repeat is a duplicate.
		if err := tx.Commit(); err != nil {
			return "", fmt.Errorf("events: commit %s: %w", ev.ID, err)
		}
		log.Warn("events: acknowledged a stale event: its purchase has events of a later epoch applied; effect not run",
			slog.Int64("epoch", ev.Epoch), slog.Int64("last_epoch", lastEpoch))
		return Stale, nil
	default:
		log.Warn("events: refused an event out of order: its purchase has a higher or equal sequence applied",
			slog.Int64("epoch", ev.Epoch), slog.Int64("last_sequence", lastSeq))
		return "", fmt.Errorf("%w: event %s has sequence %d (epoch %d), purchase %s has %d applied", ErrOutOfOrder, ev.ID, ev.Sequence, ev.Epoch, ev.PurchaseID, lastSeq)
	}
	if _, err := tx.ExecContext(ctx, r.updateSequence, order, ev.ID, r.dialect.timeArg(now), r.consumer, ev.PurchaseID); err != nil {
		return "", fmt.Errorf("events: record the sequence of %s for %s: %w", ev.PurchaseID, ev.ID, err)
	}
	if err := r.effect(ctx, tx, ev); err != nil {
		return "", &effectError{id: ev.ID, err: err}
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("events: commit %s: %w", ev.ID, err)
	}
	if (ev.Epoch == lastEpoch || last == 0) && ev.Sequence > lastSeq+1 {
		log.Warn("events: applied an event after a gap in its purchase's sequence", slog.Int64("last_sequence", lastSeq))
		if r.onGap != nil {
			r.onGap(ctx, ev, lastSeq)
		}
	} else {
		log.Debug("events: applied")
	}
	return Applied, nil
}

// repeat handles an event whose id the inbox has: a duplicate if the
// stored row has ev's content, else a conflict. Nothing is written.
func (r *Receiver) repeat(ctx context.Context, tx *sql.Tx, ev Event, log *slog.Logger) (Outcome, error) {
	var (
		typ                      string
		version                  int
		purchase, refund, digest string
		sequence                 int64
	)
	err := tx.QueryRowContext(ctx, r.selectInbox, r.consumer, ev.ID).Scan(&typ, &version, &purchase, &refund, &sequence, &digest)
	if err != nil {
		return "", fmt.Errorf("events: read the inbox row of %s: %w", ev.ID, err)
	}
	var differs []string
	for _, c := range []struct {
		name      string
		had, sent any
	}{
		{"type", typ, string(ev.Type)},
		{"schema_version", version, ev.SchemaVersion},
		{"purchase_id", purchase, ev.PurchaseID},
		{"refund_id", refund, ev.RefundID},
		{"order", sequence, ev.Order()},
		{"digest", digest, ev.Digest},
	} {
		if c.had != c.sent {
			differs = append(differs, fmt.Sprintf("%s %v (applied) vs %v (sent)", c.name, c.had, c.sent))
		}
	}
	if len(differs) > 0 {
		log.Error("events: conflict: an event with this id and another content was applied before; nothing applied", slog.Any("differs", differs))
		return "", fmt.Errorf("%w: event %s: %v", ErrConflict, ev.ID, differs)
	}
	log.Info("events: duplicate delivery; already applied")
	return Duplicate, nil
}

// effectError is an error of the shop's effect, which is always a 500
// (whatever it wraps: an effect that returns ErrConflict of its own is not
// the receiver's conflict).
type effectError struct {
	id  string
	err error
}

func (e *effectError) Error() string { return "events: effect of " + e.id + ": " + e.err.Error() }
func (e *effectError) Unwrap() error { return e.err }

// ServeHTTP receives one delivery: a POST whose body is an event and whose
// Payrecon-Signature header signs it. It answers
//
//   - 200 {"event_id", "outcome": "applied" | "duplicate" | "stale"} once
//     the event is applied (committed), was before, or is stale;
//   - 405, 413 (body over MaxBodyBytes), 400 (bad signature header, not an
//     event, digest mismatch, Event-Id header not the body's id) or 401
//     (no signature, no matching signature, timestamp outside the
//     tolerance): nothing stored;
//   - 409 {"error": "conflict" | "out_of_order"}: see ErrConflict and
//     ErrOutOfOrder; nothing stored, and a retry gets the same answer;
//   - 500: the effect or the database failed; rolled back, retry later.
//
// Every error answer is JSON {"event_id", "error", "message"}; a 500's
// message says nothing of the cause, which is logged.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	log := r.log.With(slog.String("attempt", req.Header.Get(AttemptHeader)))
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		reply(w, http.StatusMethodNotAllowed, answer{Error: "method_not_allowed", Message: "POST only"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.maxBody))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			reply(w, http.StatusRequestEntityTooLarge, answer{Error: "body_too_large", Message: err.Error()})
			return
		}
		reply(w, http.StatusBadRequest, answer{Error: "unreadable_body", Message: err.Error()})
		return
	}
	if err := Verify(req.Header.Get(SignatureHeader), r.secrets, body, r.now(), r.tolerance); err != nil {
		status, code := http.StatusUnauthorized, "signature_mismatch"
		switch {
		case errors.Is(err, ErrNoSignature):
			code = "no_signature"
		case errors.Is(err, ErrBadSignatureHeader):
			status, code = http.StatusBadRequest, "bad_signature_header"
		case errors.Is(err, ErrTimestampOutsideTolerance):
			code = "timestamp_outside_tolerance"
		}
		log.Warn("events: refused a delivery: signature", slog.String("event_id_header", req.Header.Get(EventIDHeader)), slog.Any("error", err))
		reply(w, status, answer{Error: code, Message: err.Error()})
		return
	}
	ev, err := Unmarshal(body)
	if err != nil {
		code := "invalid_event"
		if errors.Is(err, ErrDigestMismatch) {
			code = "digest_mismatch"
		}
		log.Warn("events: refused a signed delivery: not a valid event", slog.String("event_id_header", req.Header.Get(EventIDHeader)), slog.Any("error", err))
		reply(w, http.StatusBadRequest, answer{EventID: ev.ID, Error: code, Message: err.Error()})
		return
	}
	if h := req.Header.Get(EventIDHeader); h != "" && h != ev.ID {
		log.Warn("events: refused a signed delivery: Event-Id header is not the body's id", slog.String("event_id_header", h), slog.String("event_id", ev.ID))
		reply(w, http.StatusBadRequest, answer{EventID: ev.ID, Error: "event_id_mismatch", Message: fmt.Sprintf("%s header %q, body id %q", EventIDHeader, h, ev.ID)})
		return
	}
	outcome, err := r.apply(req.Context(), ev, log)
	_, fromEffect := errors.AsType[*effectError](err)
	switch {
	case err == nil:
		reply(w, http.StatusOK, answer{EventID: ev.ID, Outcome: outcome})
	case errors.Is(err, ErrConflict) && !fromEffect:
		reply(w, http.StatusConflict, answer{EventID: ev.ID, Error: "conflict", Message: err.Error()})
	case errors.Is(err, ErrOutOfOrder) && !fromEffect:
		reply(w, http.StatusConflict, answer{EventID: ev.ID, Error: "out_of_order", Message: err.Error()})
	default:
		if !errors.Is(err, context.Canceled) {
			log.Error("events: delivery failed; the sender will retry", slog.Any("error", err))
		}
		reply(w, http.StatusInternalServerError, answer{EventID: ev.ID, Error: "internal", Message: "the event was not applied; retry later"})
	}
}

// answer is the JSON body of every answer of ServeHTTP.
type answer struct {
	EventID string  `json:"event_id,omitempty"`
	Outcome Outcome `json:"outcome,omitempty"`
	Error   string  `json:"error,omitempty"`
	Message string  `json:"message,omitempty"`
}

func reply(w http.ResponseWriter, status int, a answer) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(a)
}
