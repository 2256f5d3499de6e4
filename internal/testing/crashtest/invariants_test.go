package crashtest

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the SQLite store's driver, to read its inbox

	"github.com/payrecon/payrecon/fakeprovider"
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
}

func (c counts) String() string {
	return fmt.Sprintf("%d purchases (%d escalated), %d refunds, %d charges and %d refunds at the provider, %d create calls, "+
		"%d transitions, %d webhook events in %d deliveries, %d API requests replayed",
		c.purchases, c.escalated, c.refunds, c.charges, c.providerRefunds, c.creates, c.transitions, c.events, c.deliveries, c.apiCalls)
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

// inbox returns the webhook inbox's rows' outcomes by event id, read
// from the database itself.
func (r *run) inbox() map[string][]string {
	r.t.Helper()
	out := map[string][]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const q = "SELECT event_id, outcome FROM webhook_inbox"
	if path, ok := strings.CutPrefix(r.dbURL, "sqlite:"); ok {
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
		if err != nil {
			r.t.Fatal(err)
		}
		defer db.Close()
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			r.t.Fatalf("read the inbox: %v", err)
		}
		defer rows.Close()
		for rows.Next() {
			var id, outcome string
			if err := rows.Scan(&id, &outcome); err != nil {
				r.t.Fatal(err)
			}
			out[id] = append(out[id], outcome)
		}
		if err := rows.Err(); err != nil {
			r.t.Fatal(err)
		}
		return out
	}
	conn, err := pgx.Connect(ctx, r.dbURL)
	if err != nil {
		r.t.Fatalf("read the inbox: %v", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, q)
	if err != nil {
		r.t.Fatalf("read the inbox: %v", err)
	}
	type row struct{ ID, Outcome string }
	all, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		r.t.Fatalf("read the inbox: %v", err)
	}
	for _, e := range all {
		out[e.ID] = append(out[e.ID], e.Outcome)
	}
	return out
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
