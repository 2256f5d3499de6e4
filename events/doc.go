// Package events is the wire format of the events payrecon sends to a
// shop, and the receiving half a shop imports. It uses only the standard
// library and database/sql, so a shop imports it without the rest of
// payrecon.
//
// payrecon writes an event into its outbox in the same transaction as the
// change it reports (a purchase succeeded, declined, escalated or
// resolved; a refund's final state; an audit finding opened or closed)
// and sends it to each subscription as a signed webhook until a 2xx
// answer: at least once, in order per purchase. A 2xx may be lost on its
// way back, so the same event can arrive several times; the receiver
// makes its effect happen once.
//
// # The wire format
//
// A delivery is an HTTP POST whose body is one Event as JSON (Marshal):
//
//	{"id":"evt_3f…","type":"purchase.succeeded","schema_version":1,
//	 "purchase_id":"pur_…","sequence":1,"created_at":"2026-03-01T12:00:00Z",
//	 "data":{…},"digest":"<hex SHA-256 of data>"}
//
// The id never changes: a retry or a replay sends the same id and the same
// bytes. The sequence numbers a purchase's events from 1; a subscription
// that filters types sees gaps. The digest is Digest(data). refund_id is
// present on refund events. epoch is present once payrecon's books have
// been recovered from a backup: the restore brings the sequences back
// with the books, so the recovery starts a new epoch, and events are
// ordered by (epoch, sequence) (Event.Order). An event without one is of
// epoch 0.
//
// The headers:
//
//	Payrecon-Signature: t=1772366400,v1=5257a869…
//	Event-Id: evt_3f…
//	Delivery-Attempt: 2
//
// v1 is the hex HMAC-SHA256, keyed by the subscription's secret, of the
// timestamp, a ".", and the body: Stripe's scheme. While a secret is
// rotated there is one v1 per secret (SignAll), and the receiver accepts
// any of its secrets (Config.Secrets). Only the body is signed; the
// attempt number changes between tries, the event id and the body never.
// Sign, Verify and NewRequest implement it; the sender uses Marshal,
// SetData and NewRequestBody.
//
// # Receiving
//
// Receiver is an http.Handler. For each delivery it verifies the signature
// and that its timestamp is within Config.Tolerance of the clock (401 or
// 400, nothing stored, on failure), parses the event and checks its
// digest (400), then, in one transaction of the shop's database:
//
//  1. inserts the event's id into the inbox table, whose primary key
//     decides whether the event is new (insert first: never a SELECT then
//     an INSERT, which two concurrent deliveries would both pass). An id
//     already there with the same content is a duplicate: 200, and nothing
//     else happens. With another content it is a conflict: 409, logged,
//     nothing applied;
//  2. checks the event's order, (epoch, sequence), against the highest
//     applied for its purchase. Within an epoch it is strict: a sequence
//     not above the highest is out of order, or an old event replayed
//     under a new id: 409, logged, nothing stored; more than one above it
//     is a gap: accepted, logged, and reported to Config.OnGap. An event
//     of a higher epoch is accepted whatever its sequence. An event of a
//     lower epoch is stale: 200 "stale", its id kept, the effect not run;
//  3. runs the shop's Effect with the transaction;
//  4. commits, and only then answers 200.
//
// An error from the effect rolls it all back and answers 500: the sender
// retries. A crash before the commit leaves nothing; a crash after it,
// before the 200 reaches the sender, leaves the event applied, and the
// sender's retry is a duplicate. A 409 is final: the same delivery would
// be refused again, so retrying it is pointless. Migrate creates the two
// tables in PostgreSQL or SQLite; Schema returns their DDL for a shop that
// runs its own migrations.
//
// # Two lines of defence
//
// The inbox makes each event apply once. The shop should also protect
// each irreversible effect with a business key of its own, as the
// example does with UNIQUE (purchase_id, product) on its access grants
// and ON CONFLICT DO NOTHING:
//
//   - two different events may mean the same thing for the shop (a
//     purchase that succeeded, then an operator's resolution confirming
//     it): the inbox sees two events, the business key one grant;
//   - the inbox is transport history, and may be pruned one day; the rule
//     "one grant per purchase and product" holds for ever.
//
// Keep inbox rows at least as long as payrecon may redeliver or replay an
// event (its retry window, plus the replays an operator may run), and
// longer if the shop's effects have no business key. Keep
// the sequence rows as long as the inbox rows; without them the receiver
// cannot tell an old event from a new one.
//
// The effect must do its work through the transaction it is given. A call
// to another system (an email, a payment) cannot be rolled back and would
// be repeated if the commit fails: record the intention in the
// transaction, and act on it from its own worker.
package events
