package demo

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/dburl"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
)

// demoRun is the scenarios of one demo as they play on the simulated
// clock: what each has printed, changed outside payrecon, refunded and
// had disputed.
type demoRun struct {
	cfg       Config
	out       io.Writer
	stk       *Stack
	clock     *simClock
	start     time.Time // the simulated clock at the start
	realStart time.Time

	scenarios []Scenario
	results   []Result
	seen      []map[string]bool      // lines printed, per scenario
	width     int                    // the longest scenario name
	outside   []*fakeprovider.Charge // the changes made outside payrecon, per scenario
	refunded  []string               // the refund each scenario asked for
	disputes  []disputeRun           // where each scenario's dispute plan stands
	audited   bool                   // whether the audit has run
}

func newDemoRun(cfg Config, out io.Writer, stk *Stack, clock *simClock, realStart time.Time) *demoRun {
	scenarios := Scenarios()
	r := &demoRun{
		cfg: cfg, out: out, stk: stk, clock: clock, start: clock.Now(), realStart: realStart,
		scenarios: scenarios,
		results:   make([]Result, len(scenarios)),
		seen:      make([]map[string]bool, len(scenarios)),
		outside:   make([]*fakeprovider.Charge, len(scenarios)),
		refunded:  make([]string, len(scenarios)),
		disputes:  make([]disputeRun, len(scenarios)),
	}
	for _, sc := range scenarios {
		r.width = max(r.width, len(sc.Name))
	}
	return r
}

// create makes each scenario's purchase and scripts its faults and
// webhooks at the fake.
func (r *demoRun) create(ctx context.Context) error {
	for i, sc := range r.scenarios {
		p, err := r.stk.Service.CreatePurchase(ctx, reconcile.NewPurchase{
			Customer: "demo-customer", Reference: fmt.Sprintf("demo-%d-%d", r.start.Unix(), i+1),
			Amount: int64(300 + 100*i), Currency: "usd", Description: sc.Name,
		})
		if err != nil {
			return err
		}
		r.stk.Fake.Script(p.ID, sc.Faults...)
		r.stk.FakeServer.ScriptWebhooks(p.ID, sc.Hooks...)
		r.results[i] = Result{Scenario: sc.Name, PurchaseID: p.ID, Expected: sc.Expect}
	}
	return nil
}

// observe gathers what a check looks at: the case, its refunds and its
// dispute plan's facts, and what the fake provider knows of them.
func (r *demoRun) observe(ctx context.Context, i int, c reconcile.Case) (Observed, error) {
	refunds, err := r.stk.Service.Refunds(ctx, c.Purchase.ID)
	if err != nil {
		return Observed{}, err
	}
	back := make(map[string]int, len(refunds))
	for _, d := range refunds {
		for _, pr := range r.stk.Fake.RefundsFor(d.Refund.ID) {
			if pr.MoneyReturned() {
				back[d.Refund.ID]++
			}
		}
	}
	o := Observed{
		Case: c, Charges: r.stk.Fake.MoneyTaken(c.Purchase.ID), Deliveries: r.stk.FakeServer.Deliveries(),
		Outside: r.outside[i], Audited: r.audited,
		Refunds: refunds, ProviderRefunds: back, NetCharges: r.stk.Fake.NetCharges(c.Purchase.ID),
	}
	if r.scenarios[i].Dispute != nil {
		if err := r.observeDispute(ctx, i, &o); err != nil {
			return Observed{}, err
		}
	}
	return o, nil
}

// say prints a line of scenario i's timeline once.
func (r *demoRun) say(i int, line string) {
	if r.seen[i] == nil {
		r.seen[i] = map[string]bool{}
	}
	if r.seen[i][line] {
		return
	}
	r.seen[i][line] = true
	fmt.Fprintf(r.out, "%-*s  %s\n", r.width, r.scenarios[i].Name, line)
	r.results[i].Timeline = append(r.results[i].Timeline, line)
}

// tick prints what is new in scenario i's case and refunds.
func (r *demoRun) tick(ctx context.Context, i int, c reconcile.Case) {
	for _, line := range Timeline(c, r.start) {
		r.say(i, line)
	}
	refunds, err := r.stk.Service.Refunds(ctx, c.Purchase.ID)
	if err != nil {
		return // the check that follows reads them again and fails
	}
	for _, line := range RefundTimeline(refunds, r.start) {
		r.say(i, line)
	}
}

// elapsed is the simulated time since the start.
func (r *demoRun) elapsed() time.Duration { return r.clock.Now().Sub(r.start) }

// askRefund asks for scenario i's refund of the purchase's own payment
// once the purchase has reached the state the scenario wants: the
// client's refund of the whole amount, with the plan's faults.
func (r *demoRun) askRefund(ctx context.Context, i int, c reconcile.Case) error {
	rp := r.scenarios[i].Refund
	if rp == nil || rp.OfFinding || r.refunded[i] != "" || c.Purchase.State != r.scenarios[i].Want {
		return nil
	}
	rf, err := r.stk.Service.CreateRefund(ctx, reconcile.NewRefund{
		PurchaseID: c.Purchase.ID, Amount: c.Purchase.Amount, Reason: "demo: the customer returns the goods", RequestedBy: "demo",
	})
	if err != nil {
		return err
	}
	r.stk.Fake.ScriptRefund(rf.ID, rp.Faults...)
	r.refunded[i] = rf.ID
	r.say(i, fmt.Sprintf("+%s  the client asks for refund %s of %s", ClockOffset(r.elapsed()), rf.ID,
		Money{Amount: rf.Amount, Currency: rf.Currency}))
	return nil
}

// change makes scenario i's change outside payrecon if it is due. A
// change announced by webhook is delivered before the clock moves on, so
// that its verdict lands before the purchase's next check. It returns
// the case as it stands after the change.
func (r *demoRun) change(ctx context.Context, i int, c reconcile.Case) (reconcile.Case, error) {
	o := r.scenarios[i].Outside
	if o == nil || r.outside[i] != nil || !o.Due(c.Purchase) {
		return c, nil
	}
	ch, err := o.Do(r.stk.FakeServer, c.Purchase)
	if err != nil {
		return c, err
	}
	r.outside[i] = &ch
	r.say(i, o.Line(ch, r.start))
	if !o.Webhooks {
		return c, nil
	}
	return r.delivered(ctx, i, o.String())
}

// finished moves each scenario on (prints, changes, refunds, disputes)
// and counts those whose checks pass.
func (r *demoRun) finished(ctx context.Context) (int, error) {
	n := 0
	for i, sc := range r.scenarios {
		c, err := r.stk.Service.Case(ctx, r.results[i].PurchaseID)
		if err != nil {
			return 0, err
		}
		r.tick(ctx, i, c)
		if c, err = r.change(ctx, i, c); err != nil {
			return 0, fmt.Errorf("scenario %q: %w", sc.Name, err)
		}
		r.tick(ctx, i, c)
		if err := r.askRefund(ctx, i, c); err != nil {
			return 0, fmt.Errorf("scenario %q: refund: %w", sc.Name, err)
		}
		if c, err = r.dispute(ctx, i, c); err != nil {
			return 0, fmt.Errorf("scenario %q: dispute: %w", sc.Name, err)
		}
		r.tick(ctx, i, c)
		o, err := r.observe(ctx, i, c)
		if err != nil {
			return 0, err
		}
		if len(sc.Check(o)) == 0 {
			n++
		}
	}
	return n, nil
}

// play moves the simulated clock until every scenario is settled (or
// waits for the audit only), or a limit is reached.
func (r *demoRun) play(ctx context.Context) error {
	lastProgress := time.Now()
	for {
		done, err := r.finished(ctx)
		if err != nil {
			return err
		}
		elapsed := r.elapsed()
		if done == len(r.scenarios) || elapsed > simLimit || time.Since(r.realStart) > r.cfg.Timeout || ctx.Err() != nil {
			return nil
		}
		if time.Since(lastProgress) > 2*time.Second {
			fmt.Fprintf(r.out, "… simulated time +%s, %d of %d scenarios settled\n", ClockOffset(elapsed), done, len(r.scenarios))
			lastProgress = time.Now()
		}
		// Fine steps while first answers and short backoffs play out,
		// then coarse ones through the hours of key retention.
		step := 15 * time.Second
		if elapsed > 15*time.Minute {
			step = 2 * time.Minute
		}
		r.clock.Advance(step)
		r.stk.FakeServer.Tick()
		select {
		case <-ctx.Done():
		case <-time.After(25 * time.Millisecond): // let the worker and the webhooks run
		}
	}
}

// audit runs the audit from the provider's side over every payment the
// scenarios made: the real one, listing the fake's payments over HTTP
// through the Stripe adapter. It stores its findings and escalates the
// purchases they concern; the clock stands still meanwhile. Its money at
// risk counts the demo's disputes open then. Then the operator refunds
// each duplicate charge a scenario wants refunded, the card network
// decides the disputes, and the clock runs again until those refunds
// settle and the disputes are decided. An interrupted demo skips it
// (nil), and the scenarios that need it fail.
func (r *demoRun) audit(ctx context.Context) (*Audit, error) {
	if ctx.Err() != nil {
		return nil, nil
	}
	window := provider.Window{From: r.start, Until: r.clock.Now().Add(time.Second)}
	fmt.Fprintf(r.out, "\nThe audit from the provider's side lists the payments created from +%s to +%s and matches them to the books:\n",
		ClockOffset(window.From.Sub(r.start)), ClockOffset(window.Until.Sub(r.start)))
	rep, err := r.stk.Service.Audit(ctx, window)
	if err != nil {
		return nil, fmt.Errorf("run the audit from the provider's side: %w", err)
	}
	findings, err := r.stk.Service.Findings(ctx, reconcile.AnyAccount, true)
	if err != nil {
		return nil, err
	}
	open, _, err := r.stk.Service.OpenDisputes(ctx, reconcile.AnyAccount)
	if err != nil {
		return nil, err
	}
	audit := NewAuditWithDisputes(rep, findings, open, r.results, r.start)
	asked := false
	for i, sc := range r.scenarios {
		if sc.Refund == nil || !sc.Refund.OfFinding {
			continue
		}
		for _, f := range findings {
			if f.PurchaseID != r.results[i].PurchaseID || f.Kind != reconcile.FindingDuplicateCharge || !f.Open() {
				continue
			}
			rf, err := r.stk.Service.RefundCharge(ctx, f.ID, 0, "demo-operator", "the audit shows a second charge for one purchase")
			if err != nil {
				return nil, fmt.Errorf("scenario %q: refund this charge: %w", sc.Name, err)
			}
			r.refunded[i], asked = rf.ID, true
			r.say(i, fmt.Sprintf("+%s  the operator refunds charge %s (finding %d): refund %s", ClockOffset(r.elapsed()), f.PaymentID, f.ID, rf.ID))
		}
	}
	r.audited = true
	if asked {
		fmt.Fprintf(r.out, "\nThe operators refund the duplicate charges the audit found, through the refund process:\n")
	}
	decide := false
	for i, sc := range r.scenarios {
		decide = decide || r.disputes[i].pending(sc.Dispute)
	}
	if decide {
		fmt.Fprintf(r.out, "\nThe card network decides the open disputes; payrecon hears of it by webhook:\n")
	}
	if asked || decide {
		if err := r.play(ctx); err != nil {
			return nil, err
		}
	}
	return audit, nil
}

// report checks each scenario's final case against what it expects.
func (r *demoRun) report(ctx context.Context, url string, audit *Audit) (Report, error) {
	report := Report{OK: true, Database: dburl.Redact(url), Audit: audit, Simulated: ClockOffset(r.elapsed())}
	for i, sc := range r.scenarios {
		c, err := r.stk.Service.Case(ctx, r.results[i].PurchaseID)
		if err != nil {
			return Report{}, err
		}
		r.tick(ctx, i, c)
		res := &r.results[i]
		res.FinalState = string(c.Purchase.State)
		res.Escalation = string(c.Purchase.EscalationReason)
		o, err := r.observe(ctx, i, c)
		if err != nil {
			return Report{}, err
		}
		res.Charges = o.Charges
		res.NetCharges = o.NetCharges
		for _, d := range o.Refunds {
			res.Refunds = append(res.Refunds, RefundResult{
				ID: d.Refund.ID, State: string(d.Refund.State), Escalation: string(d.Refund.EscalationReason),
				ProviderRefunds: o.ProviderRefunds[d.Refund.ID], Creates: r.stk.Fake.RefundCreateCalls(d.Refund.ProviderKey),
			})
		}
		for _, d := range c.Disputes {
			res.Disputes = append(res.Disputes, DisputeResult{
				ID: d.Dispute.ProviderDisputeID, State: string(d.Dispute.State), Amount: d.Dispute.Amount, Currency: d.Dispute.Currency,
				Withdrawn: d.Dispute.Withdrawn, Reinstated: d.Dispute.Reinstated,
			})
		}
		if o.RefusedRefund != nil {
			res.RefusedRefund = o.RefusedRefund.Error()
		}
		res.Creates = r.stk.Fake.CreateCalls(c.Purchase.ProviderKey)
		res.Problems = sc.Check(o)
		res.OK = len(res.Problems) == 0
		res.SimDuration = report.Simulated
		report.OK = report.OK && res.OK
	}
	report.Results = r.results
	report.RealTime = time.Since(r.realStart).Round(10 * time.Millisecond).String()
	return report, nil
}
