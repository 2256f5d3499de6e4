package crashtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/crashpoint"
	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/provider"
)

// Where a point is armed: the process that carries PAYRECON_CRASHPOINT.
const (
	inServe  = "serve"  // serve with its worker: the API, the webhooks, the worker, the sweeps
	inWorker = "worker" // a worker process beside serve --worker=false
	inAudit  = "audit"  // payrecon audit, run by hand
)

// scenario says how to drive the processes to one crash point: one row
// per point, so that a new point is one more row (TestEveryPointHasARow
// fails until it has one).
type scenario struct {
	point crashpoint.Point
	in    string // inServe, inWorker or inAudit
	// faults are the fake provider's (--fake-faults), before the
	// webhook settings every run adds.
	faults string
	// noWebhooks: the fake sends none (a purchase is settled by the
	// worker alone).
	noWebhooks bool
	// flags are more settings of serve and worker.
	flags []string
	// drive runs until the armed process dies, or has done all it can;
	// hit is the hit the point is armed at (1 for the first).
	drive func(r *run, hit int)
}

// scenarios: one row per crash point.
var scenarios = []scenario{
	{point: crashpoint.IntentCommitted, in: inWorker, drive: drivePurchases},
	{point: crashpoint.CallSent, in: inServe, faults: "processing=0.3,settle_after=300ms", drive: drivePurchases},
	{point: crashpoint.AnswerRead, in: inWorker, faults: "decline=0.3", drive: drivePurchases},
	{point: crashpoint.ApplyCommitted, in: inServe, faults: "lost_reply=0.3", drive: drivePurchases},
	{point: crashpoint.WebhookVerified, in: inServe, drive: drivePurchases},
	// Stored, not answered and not applied: the fake redelivers it (a
	// duplicate), and the restarted applier applies the stored one.
	{point: crashpoint.WebhookReceived, in: inServe, faults: "lost_reply=0.5", drive: drivePurchases},
	// Answered, perhaps not applied: nothing redelivers it, and the
	// restarted applier applies it from the inbox alone.
	{point: crashpoint.WebhookAnswered, in: inServe, faults: "lost_reply=0.5", drive: drivePurchases},
	// The applier's batch written, not committed: it rolls back, and the
	// restarted applier applies the batch once.
	{point: crashpoint.InboxApplyWritten, in: inServe, faults: "lost_reply=0.5", drive: drivePurchases},
	{point: crashpoint.PurchaseInserted, in: inServe, drive: drivePurchases},
	// Every reply lost, and replays too, with no webhooks, and the next
	// check 5 s away: the purchases stay uncertain until the escalation
	// sweep takes them, in one batch. (The dead process keeps the locks
	// of the sweeps it was running until their TTL, 5 min: the restarted
	// worker escalates at the next check instead, and takes over the
	// expired leases when their jobs come due.)
	{point: crashpoint.SweepMidBatch, in: inWorker, faults: "lost_reply=1", noWebhooks: true,
		flags: []string{"--max-uncertain-age", "300ms", "--backoff", "5s"}, drive: drivePurchases},
	{point: crashpoint.AuditMidWindow, in: inAudit, drive: driveAudit},
	{point: crashpoint.RefundIntentCommitted, in: inWorker, drive: driveRefunds},
	{point: crashpoint.RefundAnswerRead, in: inServe, faults: "refund_lost_reply=0.3", drive: driveRefunds},
	{point: crashpoint.RefundApplyCommitted, in: inWorker, faults: "refund_processing=0.3,settle_after=300ms", drive: driveRefunds},
	{point: crashpoint.RefundInserted, in: inServe, drive: driveRefunds},
	// The first settlement's event is written with it: killed before
	// their commit, neither exists, and the restarted worker commits both.
	// No webhooks: serve would settle a purchase first whenever its
	// webhook beat the worker's answer, and the worker, finding nothing
	// left to move, would write no event and never reach the point.
	{point: crashpoint.OutboxPending, in: inWorker, noWebhooks: true, drive: drivePurchases},
	// A dispute's effects written, not committed: they roll back with the
	// inbox row's outcome, and the restarted applier applies the stored
	// event once. Serve runs the only applier, so that it is the one to
	// reach the point. Duplicated webhooks come to the inbox twice, and
	// must be applied once too.
	{point: crashpoint.DisputeApplyWritten, in: inServe, faults: "webhook_duplicate=0.3", drive: driveDisputes},
}

// TestEveryPointHasARow fails when a crash point has no scenario, or a
// scenario names no known point.
func TestEveryPointHasARow(t *testing.T) {
	rows := map[crashpoint.Point]int{}
	for _, s := range scenarios {
		rows[s.point]++
		if !slices.Contains(crashpoint.Points, s.point) {
			t.Errorf("scenario for %q: no such crash point", s.point)
		}
	}
	for _, p := range crashpoint.Points {
		if rows[p] != 1 {
			t.Errorf("crash point %q has %d scenarios, want 1: add its row to scenarios", p, rows[p])
		}
	}
}

// TestCrashPoints kills a real process at every crash point, on both
// stores, restarts it, lets everything settle and checks the invariants.
func TestCrashPoints(t *testing.T) {
	enabled(t)
	binary(t)
	for _, store := range []string{"postgres", "sqlite"} {
		t.Run(store, func(t *testing.T) {
			for _, s := range scenarios {
				for hit := 1; hit <= *crashRuns; hit++ {
					t.Run(fmt.Sprintf("%s:%d", s.point, hit), func(t *testing.T) {
						t.Parallel()
						var url string
						if store == "postgres" {
							url = pgtest.NewDatabase(t)
						} else {
							url = "sqlite:" + filepath.Join(t.TempDir(), "payrecon.db")
						}
						crashRun(t, s, hit, url)
					})
				}
			}
		})
	}
}

// run is one crash run: its world, the armed process and what the test
// drove.
type run struct {
	*env
	s         scenario
	spec      string // PAYRECON_CRASHPOINT's value
	serveAddr string
	serveP    *proc
	workerP   *proc
	armed     *proc
	calls     []*apiCall
	seq       int
}

func crashRun(t *testing.T, s scenario, hit int, dbURL string) {
	e := newEnv(t, dbURL)
	r := &run{env: e, s: s, spec: fmt.Sprintf("%s:%d", s.point, hit)}
	e.j.add("run", "crash point %s on %s, store %s", r.spec, s.in, strings.SplitN(dbURL, ":", 2)[0])
	if !e.sqlite {
		// A Postgres database is migrated by hand before any command runs.
		mig := e.start("migrate", nil)
		<-mig.done
		if mig.exitString() != "exited with status 0" {
			t.Fatalf("migrate %s", mig.exitString())
		}
	}
	r.serveAddr = freeAddr(t)
	e.serve = "http://" + r.serveAddr
	faults := "seed=7,webhook_backoff=200ms,webhook_max_backoff=1s,webhook_attempts=50"
	if s.faults != "" {
		faults = s.faults + "," + faults
	}
	e.startFake(faults, !s.noWebhooks, r.serveAddr)
	armServe := s.in == inServe
	r.serveP = r.startServe(armServe)
	if s.in == inWorker {
		r.workerP = r.startWorker(true)
	}
	switch s.in {
	case inServe:
		r.armed = r.serveP
	case inWorker:
		r.armed = r.workerP
	}

	s.drive(r, hit)
	if s.in != inAudit {
		r.awaitCrash(r.armed)
		// Restart it without the crash point.
		if s.in == inServe {
			r.serveP = r.startServe(false)
		} else {
			r.workerP = r.startWorker(false)
		}
	}
	r.replayAll()
	r.settle()
	counts := r.checkInvariants()
	r.auditClean()
	t.Logf("%s: %s", r.spec, counts)
}

// startServe starts serve on r.serveAddr, armed or not; with a separate
// worker process it runs no worker itself.
func (r *run) startServe(armed bool) *proc {
	r.t.Helper()
	var env []string
	if armed {
		env = []string{"PAYRECON_CRASHPOINT=" + r.spec}
	}
	args := r.protocolFlags(append([]string{"--addr", r.serveAddr, "--worker-id", "serve",
		fmt.Sprintf("--worker=%t", r.s.in != inWorker)}, r.s.flags...)...)
	p := r.start("serve", env, args...)
	r.awaitHealthy(p, r.serve, "/healthz")
	if armed {
		r.armed = p
	}
	return p
}

// startWorker starts a worker process, armed or not.
func (r *run) startWorker(armed bool) *proc {
	r.t.Helper()
	var env []string
	if armed {
		env = []string{"PAYRECON_CRASHPOINT=" + r.spec}
	}
	addr := freeAddr(r.t)
	args := r.protocolFlags(append([]string{"--addr", addr, "--worker-id", "worker-1"}, r.s.flags...)...)
	p := r.start("worker", env, args...)
	// An armed worker may reach its point before it answers: wait for it
	// only when unarmed.
	if !armed {
		r.awaitHealthy(p, "http://"+addr, "/healthz")
	}
	return p
}

// awaitCrash waits for p to die at the point, by SIGKILL.
func (r *run) awaitCrash(p *proc) {
	r.t.Helper()
	r.await(p.name+" dies at "+r.spec, 60*time.Second, p.exited)
	if !p.killedBySIGKILL() {
		r.t.Fatalf("%s %s, want killed by SIGKILL at %s", p.name, p.exitString(), r.spec)
	}
}

// newPurchase posts one purchase with a key of its own.
func (r *run) newPurchase() *apiCall {
	r.seq++
	body := fmt.Appendf(nil, `{"customer":"cus_crash","amount":%d,"currency":"usd","description":"crash test %d"}`, 1000+r.seq, r.seq)
	c := r.call("/v1/purchases", fmt.Sprintf("purchase-%d", r.seq), body)
	r.calls = append(r.calls, c)
	return c
}

// drivePurchases posts purchases, one at a time, until the armed process
// dies or 4+2·hit are in, then waits for the crash.
func drivePurchases(r *run, hit int) {
	for i := 0; i < 4+2*hit && !r.armed.exited(); i++ {
		r.newPurchase()
	}
}

// driveRefunds charges 3+hit purchases, then refunds part of each
// succeeded one, until the armed process dies.
func driveRefunds(r *run, hit int) {
	r.t.Helper()
	for range 3 + hit {
		r.newPurchase()
	}
	ids := r.awaitSucceeded()
	for i, id := range ids {
		if r.armed.exited() {
			return
		}
		c := r.call("/v1/purchases/"+id+"/refunds", fmt.Sprintf("refund-%d", i+1), []byte(`{"amount":300,"reason":"requested_by_customer"}`))
		r.calls = append(r.calls, c)
	}
}

// driveAudit charges purchases, lets them settle, then runs the audit by
// hand armed at the point, and again without it: the second run must
// resume where the first stopped and finish.
func driveAudit(r *run, hit int) {
	r.t.Helper()
	for range 3 {
		r.newPurchase()
	}
	r.settle()
	// A fixed window, so that the second run is the same run.
	now := time.Now().UTC().Truncate(time.Second)
	args := []string{"--since", now.Add(-3 * time.Hour).Format(time.RFC3339), "--until", now.Add(time.Second).Format(time.RFC3339),
		"--provider", "stripe", "--stripe-api-base", r.fake}
	p := r.start("audit", []string{"PAYRECON_CRASHPOINT=" + r.spec}, args...)
	r.awaitCrash(p)
	p = r.start("audit", nil, args...)
	r.await("the audit resumes and finishes", 60*time.Second, p.exited)
	if p.exitString() != "exited with status 0" {
		r.t.Fatalf("audit after the crash %s", p.exitString())
	}
	out := readFile(r.t, p.log)
	if !strings.Contains(out, "resumed a run that had stopped midway") {
		r.t.Errorf("the audit after the crash did not resume the run it left midway:\n%s", out)
	}
	r.j.add("audit", "the second run resumed and finished")
}

// disputePlan is what driveDisputes does with one payment: it opens a
// chargeback, or an inquiry, of all of it or of amount, then moves it to
// one fake status per round, "" for none.
type disputePlan struct {
	inquiry bool
	amount  int64
	moves   []string
}

// disputePlans end in every final state, and one stays open;
// driveDisputes gives them to the payments in turn.
var disputePlans = []disputePlan{
	{moves: []string{provider.DisputeUnderReview, provider.DisputeLost}},
	{moves: []string{provider.DisputeUnderReview, provider.DisputeWon}},
	{inquiry: true, moves: []string{provider.DisputeWarningUnderReview, provider.DisputeWarningClosed}},
	{amount: 500}, // a partial chargeback, never answered
	{moves: []string{"", provider.DisputeLost}}, // decided with no review
}

// driveDisputes charges purchases, waits until they are final, then
// disputes each succeeded one's payment at the fake (disputePlans) and
// moves the disputes round by round, waiting after each round until the
// books hold what the fake says, or the armed process died. The fake
// needs no payrecon process to open or move a dispute: once the armed
// process is dead the rounds go on at once, and their webhooks are
// redelivered until the restarted process takes them.
//
// Each opening and each move applies one event at least, and a round
// starts only once the books hold the last: the drive disputes one
// payment per plan in as few whole cycles of disputePlans as apply hit
// events, so that a higher hit kills the process in a later round, amid
// the moves rather than the openings.
func driveDisputes(r *run, hit int) {
	r.t.Helper()
	perCycle := 0
	for _, p := range disputePlans {
		perCycle++
		for _, m := range p.moves {
			if m != "" {
				perCycle++
			}
		}
	}
	for range len(disputePlans) * ((hit + perCycle - 1) / perCycle) {
		r.newPurchase()
	}
	ids := r.awaitSucceeded()
	payment := map[string]string{}
	for _, c := range r.ledger().Charges {
		if c.MoneyTaken() {
			payment[c.PurchaseID] = c.PaymentID
		}
	}
	type opened struct {
		id   string
		plan disputePlan
	}
	var ds []opened
	status := map[string]string{} // the fake's, by dispute
	for i, id := range ids {
		plan := disputePlans[i%len(disputePlans)]
		if payment[id] == "" {
			r.t.Fatalf("purchase %s succeeded, and the fake's ledger has no payment of it that took money", id)
		}
		form := url.Values{"payment": {payment[id]}, "inquiry": {strconv.FormatBool(plan.inquiry)}}
		if plan.amount > 0 {
			form.Set("amount", strconv.FormatInt(plan.amount, 10))
		}
		d := r.fakeDispute("/_fake/disputes", form)
		ds = append(ds, opened{d.ID, plan})
		status[d.ID] = d.Status
	}
	r.awaitDisputesBooked(status)
	for round := 0; ; round++ {
		moved := false
		for _, d := range ds {
			if round >= len(d.plan.moves) || d.plan.moves[round] == "" {
				continue
			}
			status[d.id] = r.fakeDispute("/_fake/disputes/"+d.id, url.Values{"status": {d.plan.moves[round]}}).Status
			moved = true
		}
		if !moved {
			return
		}
		r.awaitDisputesBooked(status)
	}
}

// fakeDispute POSTs form to a dispute endpoint of the fake (POST
// /_fake/disputes opens one, POST /_fake/disputes/{id} moves one) and
// returns the dispute it answers; any other answer than a 200 fails the
// test: the drive asked for something the fake refuses.
func (r *run) fakeDispute(path string, form url.Values) fakeDisputeAnswer {
	r.t.Helper()
	resp, err := r.client.PostForm(r.fake+path, form)
	if err != nil {
		r.t.Fatalf("POST %s %s: %v", path, form.Encode(), err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	var d fakeDisputeAnswer
	if err == nil && resp.StatusCode == http.StatusOK {
		err = json.Unmarshal(b, &d)
	}
	if err != nil || resp.StatusCode != http.StatusOK || d.ID == "" {
		r.t.Fatalf("POST %s %s: %d %s %v", path, form.Encode(), resp.StatusCode, b, err)
	}
	r.j.add("drive", "POST %s %s: %s %s", path, form.Encode(), d.ID, d.Status)
	return d
}

// fakeDisputeAnswer is the part of the fake's Dispute object (Stripe's)
// the drive reads.
type fakeDisputeAnswer struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// awaitDisputesBooked waits until the books hold every dispute of status
// (the fake's status by provider dispute id) in the state its status
// means, or the armed process died.
func (r *run) awaitDisputesBooked(status map[string]string) {
	r.t.Helper()
	r.await("the disputes reach the books", 60*time.Second, func() bool {
		if r.armed.exited() {
			return true
		}
		held := map[string]string{}
		for _, d := range r.disputeRows() {
			held[d.providerID] = d.state
		}
		for id, st := range status {
			if held[id] != disputeStates[st] {
				return false
			}
		}
		return true
	})
}

// awaitSucceeded waits until every purchase posted so far is final, and
// returns the succeeded ones.
func (r *run) awaitSucceeded() []string {
	r.t.Helper()
	var ok []string
	r.await("purchases final", 60*time.Second, func() bool {
		if r.armed != nil && r.armed.exited() {
			return true
		}
		ok = ok[:0]
		for _, c := range r.calls {
			var p purchaseDetail
			if c.id == "" {
				continue
			}
			if code, err := r.getJSON(r.serve+"/v1/purchases/"+c.id, &p); err != nil || code != 200 {
				return false
			}
			switch {
			case p.State == "succeeded":
				ok = append(ok, p.ID)
			case p.State != "declined":
				return false
			}
		}
		return true
	})
	return ok
}

// replayAll sends every API request again with its key: each must be
// answered now, and as it was the first time if it was answered then.
func (r *run) replayAll() {
	r.t.Helper()
	for _, c := range r.calls {
		code, b, err := r.post(c.path, c.key, c.body)
		if err != nil {
			r.t.Errorf("replay of %s key=%s: no answer: %v", c.path, c.key, err)
			continue
		}
		var v struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(b, &v)
		r.j.add("replay", "POST %s key=%s: %d %s", c.path, c.key, code, v.ID)
		// A 5xx or a 409 (the key in flight) says "retry with the same
		// key": it is no answer yet.
		final := c.answered && c.status < 500 && c.status != http.StatusConflict
		switch {
		case final && (code != c.status || !bytes.Equal(b, c.answer)):
			r.t.Errorf("replay of %s key=%s: %d %s, want the first answer %d %s", c.path, c.key, code, b, c.status, c.answer)
		case !final && code != http.StatusCreated:
			r.t.Errorf("replay of unanswered %s key=%s (first: %d): %d %s, want 201", c.path, c.key, c.status, code, b)
		case !final:
			// A second replay must give the same answer as the first.
			code2, b2, err := r.post(c.path, c.key, c.body)
			if err != nil || code2 != code || !bytes.Equal(b2, b) {
				r.t.Errorf("second replay of %s key=%s: %d %s %v, want %d %s", c.path, c.key, code2, b2, err, code, b)
			}
			c.id = v.ID
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
