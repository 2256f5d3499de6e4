package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/budget"
)

// MaxAccounts is the most connected accounts bench backlog spreads a
// backlog over.
const MaxAccounts = 1000

// benchAccount is the bench's i-th connected account, from 1.
func benchAccount(i int) string { return fmt.Sprintf("acct_bench%d", i) }

// accountsBacklog is bench backlog over cfg.Accounts connected accounts:
// the fake limits each account apart at the budget's limits, every
// worker paces each account by its own shared budget, and the report
// measures each account: its drain against its budget, its share of the
// work while every account had some, and the others' new purchases
// behind a hot account.
func accountsBacklog(ctx context.Context, cfg BacklogConfig, st reconcile.Store, bs budget.Store, clock *backlogClock) error {
	accounts := make([]string, cfg.Accounts)
	for i := range accounts {
		accounts[i] = benchAccount(i + 1)
	}
	cfg.Reconcile.Accounts = accounts
	// Every connected account of the fake has the limits given to New,
	// each enforced over buckets of its own.
	fake := fakeprovider.New(fakeprovider.Config{RateLimits: fakeLimits(cfg.Budget.Limits)})
	r := &backlogRun{cfg: cfg, store: st, fake: fake, prov: &outage{Provider: fake, down: new(atomic.Bool)}, leaseLost: &leaseLostCounter{},
		accounts: func() (reconcile.AccountBudgets, error) { return budget.NewAccounts(bs, cfg.Budget, nil) },
	}
	r.accountOf = func(i int) string {
		switch {
		case i < cfg.N:
			return accounts[i%len(accounts)]
		case i < r.size():
			return accounts[0]
		case cfg.Hot > 0: // the new purchases, in the quiet accounts
			return accounts[1+i%(len(accounts)-1)]
		}
		return accounts[i%len(accounts)]
	}
	if err := r.makeBacklog(ctx); err != nil {
		return err
	}
	lift, stop, err := r.lift(ctx, bs, clock)
	if err != nil {
		return err
	}
	defer stop.all()
	even := r.evenBacklog()
	if err := r.waitCharged(ctx, accounts, even, lift); err != nil {
		return err
	}
	stop.arrivals()
	if err := r.waitFinal(ctx, append(slices.Collect(maps.Keys(even)), r.arrived()...)); err != nil {
		return err
	}
	stop.work()

	rep, err := r.accountsReport(ctx, accounts, even, lift)
	if err != nil {
		return err
	}
	writeAccountsReport(cfg.Stdout, rep)
	if len(rep.problems) > 0 {
		return fmt.Errorf("THE LEDGER CHECK FAILED: %s", rep.problems[0])
	}
	return nil
}

// evenBacklog is the set of the backlog's purchases spread over every
// account: all but the hot account's extra ones.
func (r *backlogRun) evenBacklog() map[string]bool {
	even := make(map[string]bool, r.cfg.N)
	for id := range r.backlog {
		even[id] = true
	}
	for _, id := range r.hotIDs() {
		delete(even, id)
	}
	return even
}

// hotIDs are the hot account's extra purchases, in the order made.
func (r *backlogRun) hotIDs() []string { return r.order[r.cfg.N:] }

// waitCharged returns when every purchase of even is charged, and new
// purchases have arrived for cfg.For since lift. It prints progress each
// second.
func (r *backlogRun) waitCharged(ctx context.Context, accounts []string, even map[string]bool, lift time.Time) error {
	last := time.Now()
	for {
		charged := 0
		for _, a := range accounts {
			for _, c := range r.fake.Account(a).Charges() {
				if even[c.PurchaseID] {
					charged++
				}
			}
		}
		if time.Since(last) >= time.Second {
			fmt.Fprintf(r.cfg.Stderr, "drain: %d/%d of the even backlog charged, %d new purchases\n", charged, len(even), len(r.arrived()))
			last = time.Now()
		}
		if charged >= len(even) && time.Since(lift) >= r.cfg.For {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitFinal returns when every purchase of ids is final.
func (r *backlogRun) waitFinal(ctx context.Context, ids []string) error {
	for len(ids) > 0 {
		var open []string
		for _, id := range ids {
			d, err := r.svcs[0].Purchase(ctx, id)
			if err != nil {
				return err
			}
			if !d.Purchase.State.Terminal() {
				open = append(open, id)
			}
		}
		if ids = open; len(ids) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// accountDrain is one account's even backlog as the provider charged it.
type accountDrain struct {
	account     string
	charges     int
	first, last time.Time
	peak        int // the most creates admitted in any 1-second window
}

// rate is the account's charges a second, from its first to its last.
func (d accountDrain) rate() float64 {
	if d.charges < 2 {
		return 0
	}
	return float64(d.charges-1) / d.last.Sub(d.first).Seconds()
}

type accountsReport struct {
	n, accounts, workers int
	fresh                bool
	rate, limit, global  float64
	headroom             float64
	drain                time.Duration  // from the first create of the even backlog to its last
	drains               []accountDrain // by rate, slowest first
	fairWindow           time.Duration  // from the lift until the first account's even backlog was charged
	fairLeast            float64        // the least served account's charges in fairWindow, over the mean
	throttled, peak      int
	leaseLost            int
	hot                  string
	hotQueued, hotDone   int
	newLatencies         []time.Duration
	pacing               time.Duration // an account's budget's interval between two creates
	charges              int
	problems             []string
}

// accountsReport measures the run from the fake's books of each account
// and the purchases.
func (r *backlogRun) accountsReport(ctx context.Context, accounts []string, even map[string]bool, lift time.Time) (accountsReport, error) {
	lat, err := r.newLatencies(ctx)
	if err != nil {
		return accountsReport{}, err
	}
	limits := r.cfg.Budget.Limits
	rep := accountsReport{
		n: len(even), accounts: len(accounts), workers: r.cfg.Workers, fresh: r.cfg.Fresh, rate: r.cfg.Rate,
		limit: limits.Create, global: limits.Global, headroom: r.cfg.Budget.Headroom,
		leaseLost: int(r.leaseLost.n.Load()), newLatencies: lat,
	}
	if pace := limits.Create * (1 - r.cfg.Budget.Headroom); pace > 0 {
		rep.pacing = time.Duration(float64(time.Second) / pace)
	}
	hot := map[string]bool{}
	for _, id := range r.hotIDs() {
		hot[id] = true
	}
	if r.cfg.Hot > 0 {
		rep.hot, rep.hotQueued = accounts[0], r.cfg.Hot
	}
	byPurchase := map[string]int{}
	charged := map[string][]time.Time{}
	var first, last time.Time
	for _, a := range accounts {
		books := r.fake.Account(a)
		d := accountDrain{account: a, peak: maxPerSecond(books.AdmittedTimes("create"))}
		for _, c := range books.Charges() {
			byPurchase[c.PurchaseID]++
			rep.charges++
			charged[a] = append(charged[a], c.CreatedAt)
			if hot[c.PurchaseID] {
				rep.hotDone++
			}
			if !even[c.PurchaseID] {
				continue
			}
			if d.charges == 0 || c.CreatedAt.Before(d.first) {
				d.first = c.CreatedAt
			}
			if c.CreatedAt.After(d.last) {
				d.last = c.CreatedAt
			}
			d.charges++
		}
		for _, c := range budgetClasses {
			rep.throttled += books.ThrottledCalls(c)
		}
		rep.peak = max(rep.peak, d.peak)
		if d.charges > 0 {
			if first.IsZero() || d.first.Before(first) {
				first = d.first
			}
			if d.last.After(last) {
				last = d.last
			}
		}
		rep.drains = append(rep.drains, d)
	}
	rep.drain = last.Sub(first)
	slices.SortFunc(rep.drains, func(x, y accountDrain) int { return cmp.Compare(x.rate(), y.rate()) })
	rep.fairWindow, rep.fairLeast = fairShare(accounts, rep.drains, charged, lift)
	for id, k := range byPurchase {
		if k > 1 {
			rep.problems = append(rep.problems, fmt.Sprintf("purchase %s charged %d times", id, k))
		}
	}
	for _, id := range append(slices.Collect(maps.Keys(even)), r.newIDs...) {
		if byPurchase[id] != 1 {
			rep.problems = append(rep.problems, fmt.Sprintf("purchase %s final with %d charges", id, byPurchase[id]))
		}
	}
	return rep, nil
}

// fairShare measures the accounts' shares of the work while every one
// had some queued: from lift until the first account's even backlog was
// all charged. It returns that window and the least served account's
// charges in it over the mean (1: an equal share; 0 when some account
// had no even backlog).
func fairShare(accounts []string, drains []accountDrain, charged map[string][]time.Time, lift time.Time) (time.Duration, float64) {
	var end time.Time
	for _, d := range drains {
		if d.charges == 0 {
			return 0, 0
		}
		if end.IsZero() || d.last.Before(end) {
			end = d.last
		}
	}
	least, total := -1, 0
	for _, a := range accounts {
		k := 0
		for _, at := range charged[a] {
			if !at.After(end) {
				k++
			}
		}
		total += k
		if least < 0 || k < least {
			least = k
		}
	}
	if total == 0 {
		return 0, 0
	}
	return end.Sub(lift), float64(least) / (float64(total) / float64(len(accounts)))
}

// budgetClasses are the fake's rate-limit classes.
var budgetClasses = []string{"create", "retrieve", "search", "list", "refund"}

func writeAccountsReport(w io.Writer, r accountsReport) {
	what := "uncertain after an outage"
	if r.fresh {
		what = "created, none sent"
	}
	fmt.Fprintf(w, "bench backlog: %d purchases %s across %d accounts (%d each), %d workers, budget %.0f creates/s per account (global %.0f, headroom %.0f%%), %.1f new purchases/s during the drain\n",
		r.n, what, r.accounts, r.n/r.accounts, r.workers, r.limit, r.global, 100*r.headroom, r.rate)
	fmt.Fprintf(w, "  drain:           %s (%.1f backlog purchases/s in all, of %.0f budgeted)\n",
		r.drain.Round(time.Millisecond), float64(r.n)/max(r.drain.Seconds(), 1e-9), r.limit*float64(r.accounts))
	if k := len(r.drains); k > 0 && r.n > 0 {
		under := 0
		for _, d := range r.drains {
			if d.rate() < 0.9*r.limit {
				under++
			}
		}
		pct := func(d accountDrain) float64 { return 100 * d.rate() / r.limit }
		fmt.Fprintf(w, "  per account:     drained at %.1f%% (slowest), %.1f%% (median), %.1f%% (fastest) of its budget; %d of %d accounts under 90%%\n",
			pct(r.drains[0]), pct(r.drains[k/2]), pct(r.drains[k-1]), under, k)
		fmt.Fprintf(w, "  fair share:      while every account had work (%s), the least served had %.1f%% of the mean\n",
			r.fairWindow.Round(time.Millisecond), 100*r.fairLeast)
	}
	fmt.Fprintf(w, "  answered 429:    %d\n", r.throttled)
	fmt.Fprintf(w, "  creates/s:       at most %d in any 1-second window of one account (limit %.0f)\n", r.peak, r.limit)
	fmt.Fprintf(w, "  lease_lost:      %d transitions\n", r.leaseLost)
	if r.hot != "" {
		fmt.Fprintf(w, "  hot account:     %s, %d more queued, %d of them charged when the run stopped\n", r.hot, r.hotQueued, r.hotDone)
	}
	q := func(f float64) time.Duration { return quantile(r.newLatencies, f) }
	fmt.Fprintf(w, "  new purchases:   %d, created → final p50 %s, p99 %s, max %s (an account's pacing: %s a create)\n",
		len(r.newLatencies), q(0.50), q(0.99), q(1), r.pacing.Round(time.Millisecond))
	fmt.Fprintf(w, "  ledger:          %d charges, %d problems\n", r.charges, len(r.problems))
}
