package crashtest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the PostgreSQL store's driver, to read the tables the API does not show
	_ "modernc.org/sqlite"             // the SQLite store's driver, likewise

	"github.com/payrecon/payrecon/events"
	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/statemachine"
)

// purchaseDetail is GET /v1/purchases/{id}, and refundDetail GET
// /v1/refunds/{id}: the parts the invariants read.
type purchaseDetail struct {
	ID          string       `json:"id"`
	State       string       `json:"state"`
	Escalated   bool         `json:"escalated"`
	Transitions []transition `json:"transitions"`
	Attempts    []attempt    `json:"provider_attempts"`
	Refunds     []struct {
		ID string `json:"id"`
	} `json:"refunds"`
}

type refundDetail struct {
	ID          string       `json:"id"`
	PurchaseID  string       `json:"purchase_id"`
	State       string       `json:"state"`
	Escalated   bool         `json:"escalated"`
	Transitions []transition `json:"transitions"`
	Attempts    []attempt    `json:"provider_attempts"`
}

type transition struct {
	From  string `json:"from"`
	To    string `json:"to"`
	Cause string `json:"cause"`
	Actor string `json:"actor"`
}

type attempt struct {
	Op  string `json:"op"`
	Key string `json:"idempotency_key"`
}

// settled reports whether a purchase or refund needs nothing more: final,
// or uncertain and on the operator list.
func settled(m statemachine.Machine, state string, escalated bool) bool {
	s, err := m.Parse(state)
	return err == nil && (m.Terminal(s) || (s == statemachine.Uncertain && escalated))
}

// books reads every purchase the test knows of, with its refunds.
func (r *run) books() (map[string]purchaseDetail, map[string]refundDetail, error) {
	ps, rs := map[string]purchaseDetail{}, map[string]refundDetail{}
	for _, c := range r.calls {
		if c.id == "" || !strings.HasPrefix(c.path, "/v1/purchases") || strings.HasSuffix(c.path, "/refunds") {
			continue
		}
		var p purchaseDetail
		if code, err := r.getJSON(r.serve+"/v1/purchases/"+c.id, &p); err != nil || code != 200 {
			return nil, nil, fmt.Errorf("GET purchase %s: %d %v", c.id, code, err)
		}
		ps[p.ID] = p
		for _, ref := range p.Refunds {
			var d refundDetail
			if code, err := r.getJSON(r.serve+"/v1/refunds/"+ref.ID, &d); err != nil || code != 200 {
				return nil, nil, fmt.Errorf("GET refund %s: %d %v", ref.ID, code, err)
			}
			rs[d.ID] = d
		}
	}
	return ps, rs, nil
}

// settle waits until every purchase and refund is settled and the fake
// has no webhook left to deliver.
func (r *run) settle() {
	r.t.Helper()
	start := time.Now()
	var why string
	r.await("everything settles", 90*time.Second, func() bool {
		ps, rs, err := r.books()
		if err != nil {
			why = err.Error()
			return false
		}
		for _, p := range ps {
			if !settled(statemachine.Purchase, p.State, p.Escalated) {
				why = "purchase " + p.ID + " is " + p.State
				return false
			}
		}
		for _, d := range rs {
			if !settled(statemachine.Refund, d.State, d.Escalated) {
				why = "refund " + d.ID + " is " + d.State
				return false
			}
		}
		wh := r.webhooks()
		if n := wh.Stats.Pending; n > 0 {
			why = fmt.Sprintf("%d webhook copies pending", n)
			return false
		}
		// An event the fake has just made may not have a delivery yet, and
		// then counts as pending nowhere: wait until each has an answer
		// that ends it, acknowledged or given up (which the invariants report).
		ended := map[string]bool{}
		for _, d := range wh.Deliveries {
			if d.Acked || d.GaveUp {
				ended[d.EventID] = true
			}
		}
		for _, ev := range wh.Events {
			if !ended[ev.ID] {
				why = "webhook " + ev.ID + " has no delivery that ended"
				return false
			}
		}
		// Stored is not applied: wait for the applier too.
		for id, outcomes := range r.inbox() {
			if slices.Contains(outcomes, "pending") {
				why = "webhook " + id + " is stored, not applied"
				return false
			}
		}
		return true
	})
	r.j.add("settle", "settled in %s (last wait: %s)", time.Since(start).Round(time.Millisecond), why)
}

// counts are what the invariants checked, for the report.
type counts struct {
	purchases, refunds, charges, providerRefunds, transitions int
	escalated, creates, events, deliveries, apiCalls          int
	disputes                                                  int
}

func (c counts) String() string {
	return fmt.Sprintf("%d purchases (%d escalated), %d refunds, %d charges, %d refunds and %d disputes at the provider, %d create calls, "+
		"%d transitions, %d webhook events in %d deliveries, %d API requests replayed",
		c.purchases, c.escalated, c.refunds, c.charges, c.providerRefunds, c.disputes, c.creates, c.transitions, c.events, c.deliveries, c.apiCalls)
}

// checkInvariants checks the invariants against the fake's ledger and the
// books, and journals what the ledger saw and the transitions.
func (r *run) checkInvariants() counts {
	r.t.Helper()
	var n counts
	ps, rs, err := r.books()
	if err != nil {
		r.t.Fatal(err)
	}
	l := r.ledger()
	wh := r.webhooks()
	n.purchases, n.refunds, n.apiCalls = len(ps), len(rs), len(r.calls)

	// The ledger, in the journal.
	for _, c := range l.Charges {
		r.j.add("ledger", "charge %s of %s: %s (final %s), key %s", c.PaymentID, c.PurchaseID, c.Status, c.FinalStatus, c.IdempotencyKey)
	}
	for _, f := range l.Refunds {
		r.j.add("ledger", "refund %s (%s) of %s: %s, key %s", f.ID, f.RefundID, f.PaymentID, f.Status, f.IdempotencyKey)
	}
	r.j.add("ledger", "calls %+v; create calls by key %v; refund create calls by key %v", l.Calls, l.CreateCalls, l.RefundCreateCalls)

	// At most one charge per purchase, one refund per refund id, each
	// under the purchase's (the refund's) one key.
	charges := map[string]int{}
	for _, c := range l.Charges {
		n.charges++
		charges[c.PurchaseID]++
		if want := "payrecon-" + c.PurchaseID; c.IdempotencyKey != want {
			r.t.Errorf("charge %s of %s under key %q, want %q", c.PaymentID, c.PurchaseID, c.IdempotencyKey, want)
		}
		if _, ok := ps[c.PurchaseID]; !ok {
			r.t.Errorf("charge %s names purchase %q, which the books do not have", c.PaymentID, c.PurchaseID)
		}
	}
	for id, k := range charges {
		if k > 1 {
			r.t.Errorf("purchase %s charged %d times at the provider", id, k)
		}
	}
	refunds := map[string]int{}
	for _, f := range l.Refunds {
		n.providerRefunds++
		refunds[f.RefundID]++
		if want := "payrecon-" + f.RefundID; f.IdempotencyKey != want {
			r.t.Errorf("provider refund %s of %s under key %q, want %q", f.ID, f.RefundID, f.IdempotencyKey, want)
		}
	}
	for id, k := range refunds {
		if k > 1 {
			r.t.Errorf("refund %s made %d times at the provider", id, k)
		}
	}
	// One key per purchase in every create: every create call's key is
	// one purchase's own.
	for key, k := range l.CreateCalls {
		n.creates += k
		if id, ok := strings.CutPrefix(key, "payrecon-"); !ok || ps[id].ID == "" {
			r.t.Errorf("%d create calls under key %q, which is no known purchase's", k, key)
		}
	}
	for key, k := range l.RefundCreateCalls {
		if id, ok := strings.CutPrefix(key, "payrecon-"); !ok || rs[id].ID == "" {
			r.t.Errorf("%d refund create calls under key %q, which is no known refund's", k, key)
		}
	}

	// Every purchase settled, its chain of transitions unbroken and inside
	// the table, never out of succeeded; the same for refunds.
	ids := make([]string, 0, len(ps))
	for id := range ps {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		p := ps[id]
		if p.Escalated {
			n.escalated++
		}
		n.transitions += len(p.Transitions)
		r.checkChain(statemachine.Purchase, "purchase "+id, p.State, p.Escalated, p.Transitions)
		for _, a := range p.Attempts {
			if a.Op == "create" && a.Key != "payrecon-"+id {
				r.t.Errorf("purchase %s: a create under key %q", id, a.Key)
			}
		}
		switch {
		case p.State == "succeeded" && charges[id] != 1:
			r.t.Errorf("purchase %s succeeded with %d charges at the provider", id, charges[id])
		case p.State == "declined" && charges[id] > 0 && chargeTook(l.Charges, id):
			r.t.Errorf("purchase %s declined, but the provider took its money", id)
		}
	}
	for id, d := range rs {
		n.transitions += len(d.Transitions)
		r.checkChain(statemachine.Refund, "refund "+id, d.State, d.Escalated, d.Transitions)
		if d.State == "succeeded" && refunds[id] != 1 {
			r.t.Errorf("refund %s succeeded with %d refunds at the provider", id, refunds[id])
		}
	}

	// Every webhook applied once, or redelivered until it was: each event
	// the fake sent has an acknowledged copy, and the inbox holds it once.
	n.events, n.deliveries = len(wh.Events), len(wh.Deliveries)
	acked := map[string]bool{}
	for _, d := range wh.Deliveries {
		if d.Acked {
			acked[d.EventID] = true
		}
		if d.GaveUp {
			r.t.Errorf("webhook %s (%s): the fake gave up on it (%d %s): neither applied nor redelivered", d.EventID, d.Type, d.StatusCode, d.Err)
		}
		if !d.Acked {
			r.j.add("webhook", "%s (%s) copy %d attempt %d: %d %s", d.EventID, d.Type, d.Copy, d.Attempt, d.StatusCode, d.Err)
		}
	}
	inbox := r.inbox()
	for _, ev := range wh.Events {
		if !acked[ev.ID] {
			r.t.Errorf("webhook %s (%s of %s): never acknowledged", ev.ID, ev.Type, ev.PurchaseID)
			continue
		}
		switch outcomes := inbox[ev.ID]; {
		case len(outcomes) != 1:
			r.t.Errorf("webhook %s (%s of %s): acknowledged, and %d times in the inbox, want once", ev.ID, ev.Type, ev.PurchaseID, len(outcomes))
		case outcomes[0] == "pending" || outcomes[0] == "failed":
			r.t.Errorf("webhook %s (%s of %s): acknowledged, and %s in the inbox: never applied", ev.ID, ev.Type, ev.PurchaseID, outcomes[0])
		}
	}
	n.disputes = r.checkDisputes(ps, l)
	r.j.add("check", "%s", n)
	return n
}

func chargeTook(cs []fakeprovider.LedgerCharge, purchaseID string) bool {
	for _, c := range cs {
		if c.PurchaseID == purchaseID && c.MoneyTaken() {
			return true
		}
	}
	return false
}

// checkChain checks one history: it starts at created, each move starts
// where the last ended, each is in m's table, none leaves succeeded, and
// it ends at the current state, which is settled.
func (r *run) checkChain(m statemachine.Machine, what, state string, escalated bool, ts []transition) {
	r.t.Helper()
	at := string(statemachine.Created)
	var moves []string
	for _, t := range ts {
		moves = append(moves, fmt.Sprintf("%s→%s (%s, %s)", t.From, t.To, t.Cause, t.Actor))
		if t.From != at {
			r.t.Errorf("%s: chain broken: a move from %s after reaching %s", what, t.From, at)
		}
		if err := m.Transition(statemachine.State(t.From), statemachine.State(t.To)); err != nil {
			r.t.Errorf("%s: move outside the table: %v", what, err)
		}
		if t.From == string(statemachine.Succeeded) {
			r.t.Errorf("%s: left succeeded for %s", what, t.To)
		}
		at = t.To
	}
	r.j.add("chain", "%s: %s, now %s (escalated %t)", what, strings.Join(moves, ", "), state, escalated)
	if at != state {
		r.t.Errorf("%s: the chain ends at %s, the state is %s", what, at, state)
	}
	if !settled(m, state, escalated) {
		r.t.Errorf("%s: %s, neither final nor uncertain and escalated", what, state)
	}
}

// query runs q against the run's database, read-only, and calls scan on
// each row. The invariants read there what the API does not show: the
// inbox, the disputes and their history, the outbox.
func (r *run) query(what, q string, scan func(*sql.Rows) error) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	driver, dsn := "pgx", r.dbURL
	if path, ok := strings.CutPrefix(r.dbURL, "sqlite:"); ok {
		driver, dsn = "sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)"
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		r.t.Fatalf("read %s: %v", what, err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		r.t.Fatalf("read %s: %v", what, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			r.t.Fatalf("read %s: %v", what, err)
		}
	}
	if err := rows.Err(); err != nil {
		r.t.Fatalf("read %s: %v", what, err)
	}
}

// inbox returns the webhook inbox's rows' outcomes by event id.
func (r *run) inbox() map[string][]string {
	r.t.Helper()
	out := map[string][]string{}
	r.query("the inbox", "SELECT event_id, outcome FROM webhook_inbox", func(rows *sql.Rows) error {
		var id, outcome string
		if err := rows.Scan(&id, &outcome); err != nil {
			return err
		}
		out[id] = append(out[id], outcome)
		return nil
	})
	return out
}

// disputeStates maps each provider dispute status (the fake's are
// Stripe's) to the state the books must hold the dispute in.
var disputeStates = map[string]string{
	provider.DisputeWarningNeedsResponse: string(statemachine.Open),
	provider.DisputeNeedsResponse:        string(statemachine.Open),
	provider.DisputeWarningUnderReview:   string(statemachine.EvidenceSubmitted),
	provider.DisputeUnderReview:          string(statemachine.EvidenceSubmitted),
	provider.DisputeWon:                  string(statemachine.Won),
	provider.DisputeLost:                 string(statemachine.Lost),
	provider.DisputeWarningClosed:        string(statemachine.Closed),
	provider.DisputePrevented:            string(statemachine.Closed),
}

// disputeRow is a row of the books' disputes.
type disputeRow struct {
	id, providerID, purchaseID, paymentID, state string
}

// disputeRows reads the books' disputes, in id order.
func (r *run) disputeRows() []disputeRow {
	r.t.Helper()
	var out []disputeRow
	r.query("the disputes", "SELECT id, provider_dispute_id, purchase_id, payment_id, state FROM disputes ORDER BY id", func(rows *sql.Rows) error {
		var d disputeRow
		if err := rows.Scan(&d.id, &d.providerID, &d.purchaseID, &d.paymentID, &d.state); err != nil {
			return err
		}
		out = append(out, d)
		return nil
	})
	return out
}

// outboxRow is an event of the outbox; dispute is the provider's id of
// the dispute a dispute event is about, from its payload.
type outboxRow struct {
	typ      events.Type
	sequence int64
	dispute  string
}

// checkDisputes checks the books' disputes against the fake's, and
// returns how many the fake holds. Each of the fake's is in the books
// once, for the purchase whose payment it disputes, in the state its
// status means, by an unbroken history that repeats no move; its purchase
// is still succeeded, and the purchase's outbox has one dispute.opened of
// it and, once it is decided, one event of its decision, after it and
// after the purchase.succeeded. The books hold no other dispute, and the
// outbox no event of another.
func (r *run) checkDisputes(ps map[string]purchaseDetail, l fakeprovider.Ledger) int {
	r.t.Helper()
	owner := map[string]string{} // purchase by payment, as the fake's metadata says
	for _, c := range l.Charges {
		owner[c.PaymentID] = c.PurchaseID
	}
	books := map[string][]disputeRow{}
	for _, d := range r.disputeRows() {
		books[d.providerID] = append(books[d.providerID], d)
	}
	moves := map[string][]transition{}
	r.query("the disputes' transitions", "SELECT dispute_id, from_state, to_state, cause, actor FROM transitions WHERE dispute_id IS NOT NULL ORDER BY id",
		func(rows *sql.Rows) error {
			var id string
			var t transition
			if err := rows.Scan(&id, &t.From, &t.To, &t.Cause, &t.Actor); err != nil {
				return err
			}
			moves[id] = append(moves[id], t)
			return nil
		})
	outbox := map[string][]outboxRow{}
	r.query("the outbox", "SELECT purchase_id, event_type, sequence, payload FROM outbox ORDER BY purchase_id, sequence", func(rows *sql.Rows) error {
		var purchase, typ string
		var seq int64
		var payload []byte
		if err := rows.Scan(&purchase, &typ, &seq, &payload); err != nil {
			return err
		}
		ev := outboxRow{typ: events.Type(typ), sequence: seq}
		if strings.HasPrefix(typ, "dispute.") {
			var body struct {
				Data struct {
					ProviderDisputeID string `json:"provider_dispute_id"`
				} `json:"data"`
			}
			if err := json.Unmarshal(payload, &body); err != nil {
				return fmt.Errorf("event %d of %s (%s): %v", seq, purchase, typ, err)
			}
			ev.dispute = body.Data.ProviderDisputeID
		}
		outbox[purchase] = append(outbox[purchase], ev)
		return nil
	})

	known := map[string]bool{}
	for _, d := range l.Disputes {
		known[d.ID] = true
		want := disputeStates[d.Status]
		purchase := owner[d.PaymentID]
		r.j.add("ledger", "dispute %s of %s (purchase %s): %s, %s, amount %d", d.ID, d.PaymentID, purchase, d.Status, d.Reason, d.Amount)
		what := fmt.Sprintf("dispute %s of payment %s (purchase %s, %s at the provider)", d.ID, d.PaymentID, purchase, d.Status)
		if want == "" {
			r.t.Errorf("%s: a status the test does not know", what)
			continue
		}
		rows := books[d.ID]
		if len(rows) != 1 {
			r.t.Errorf("%s: %d disputes in the books, want 1", what, len(rows))
			continue
		}
		b := rows[0]
		if b.purchaseID != purchase || b.paymentID != d.PaymentID {
			r.t.Errorf("%s: the books hold it (%s) for payment %s of purchase %s", what, b.id, b.paymentID, b.purchaseID)
		}
		if b.state != want {
			r.t.Errorf("%s: the books hold it (%s) %s, want %s", what, b.id, b.state, want)
		}
		if p, ok := ps[purchase]; !ok || p.State != string(statemachine.Succeeded) {
			r.t.Errorf("%s: its purchase is %q, want still succeeded", what, p.State)
		}
		r.checkDisputeChain(what+" ("+b.id+")", b.state, moves[b.id])
		r.checkDisputeEvents(what, d.ID, want, outbox[purchase])
	}
	for id, rows := range books {
		if !known[id] {
			for _, b := range rows {
				r.t.Errorf("the books hold dispute %s (provider's %s) of purchase %s, which the provider does not have", b.id, id, b.purchaseID)
			}
		}
	}
	for purchase, evs := range outbox {
		for _, ev := range evs {
			if strings.HasPrefix(string(ev.typ), "dispute.") && !known[ev.dispute] {
				r.t.Errorf("purchase %s: outbox event %d %s about dispute %q, which the provider does not have", purchase, ev.sequence, ev.typ, ev.dispute)
			}
		}
	}
	return len(l.Disputes)
}

// checkDisputeChain checks one dispute's history: it starts at open, each
// move starts where the last ended, each is in the dispute machine's
// table, it ends at the current state, and no move happens twice. (The
// one move that may: open → evidence submitted again after an inquiry
// under review escalated to a chargeback, evidence submitted → open;
// Stripe's statuses only move forward, so it escalates once at most.)
func (r *run) checkDisputeChain(what, state string, ts []transition) {
	r.t.Helper()
	at := string(statemachine.Dispute.Start())
	seen := map[string]int{}
	var moves []string
	for _, t := range ts {
		move := t.From + "→" + t.To
		moves = append(moves, fmt.Sprintf("%s (%s, %s)", move, t.Cause, t.Actor))
		if t.From != at {
			r.t.Errorf("%s: chain broken: a move from %s after reaching %s", what, t.From, at)
		}
		if err := statemachine.Dispute.Transition(statemachine.State(t.From), statemachine.State(t.To)); err != nil {
			r.t.Errorf("%s: move outside the table: %v", what, err)
		}
		seen[move]++
		at = t.To
	}
	r.j.add("chain", "%s: %s, now %s", what, strings.Join(moves, ", "), state)
	if at != state {
		r.t.Errorf("%s: the chain ends at %s, the state is %s", what, at, state)
	}
	escalations := seen[string(statemachine.EvidenceSubmitted)+"→"+string(statemachine.Open)]
	for move, k := range seen {
		allowed := 1
		if move == string(statemachine.Open)+"→"+string(statemachine.EvidenceSubmitted) {
			allowed += escalations
		}
		if k > allowed {
			r.t.Errorf("%s: move %s %d times, want %d at most", what, move, k, allowed)
		}
	}
}

// checkDisputeEvents checks the outbox events of dispute id (the
// provider's), in state in the books, among evs, its purchase's events in
// sequence order: one dispute.opened after the purchase's one
// purchase.succeeded, and one event of its decision after that when
// state is final, none when it is not.
func (r *run) checkDisputeEvents(what, id, state string, evs []outboxRow) {
	r.t.Helper()
	var succeeded, opened, decided []outboxRow
	for _, ev := range evs {
		switch {
		case ev.typ == events.PurchaseSucceeded:
			succeeded = append(succeeded, ev)
		case ev.dispute != id:
		case ev.typ == events.DisputeOpened:
			opened = append(opened, ev)
		default:
			decided = append(decided, ev)
		}
	}
	wantDecided := 0
	if statemachine.Dispute.Terminal(statemachine.State(state)) {
		wantDecided = 1
	}
	switch {
	case len(succeeded) != 1:
		r.t.Errorf("%s: its purchase has %d purchase.succeeded events, want 1", what, len(succeeded))
	case len(opened) != 1:
		r.t.Errorf("%s: %d dispute.opened events, want 1", what, len(opened))
	case len(decided) != wantDecided:
		r.t.Errorf("%s: %d events of a decision (%v), want %d", what, len(decided), decided, wantDecided)
	case opened[0].sequence < succeeded[0].sequence:
		r.t.Errorf("%s: dispute.opened is event %d, before purchase.succeeded, event %d", what, opened[0].sequence, succeeded[0].sequence)
	case wantDecided == 1 && decided[0].typ != events.Type("dispute."+state):
		r.t.Errorf("%s: decided by %s, want dispute.%s", what, decided[0].typ, state)
	case wantDecided == 1 && decided[0].sequence < opened[0].sequence:
		r.t.Errorf("%s: %s is event %d, before dispute.opened, event %d", what, decided[0].typ, decided[0].sequence, opened[0].sequence)
	}
}

// auditClean runs the provider-side audit by hand over the last three
// hours: it must find nothing unexplained.
func (r *run) auditClean() {
	r.t.Helper()
	p := r.start("audit", nil, "--since", "3h", "--provider", "stripe", "--stripe-api-base", r.fake)
	r.await("the audit finishes", 60*time.Second, p.exited)
	out := readFile(r.t, p.log)
	if p.exitString() != "exited with status 0" || !strings.Contains(out, "new findings: 0") || !strings.Contains(out, "open findings in all: 0") {
		r.t.Errorf("the audit %s and found something:\n%s", p.exitString(), out)
	}
	r.j.add("audit", "clean: no finding")
}
