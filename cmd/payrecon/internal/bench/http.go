package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
)

// benchHTTPTimeout bounds one request of an HTTP bench.
const benchHTTPTimeout = time.Minute

// benchClient is the HTTP client of an HTTP bench: clients connections
// at most, kept alive.
func benchClient(clients int) *http.Client {
	return &http.Client{Timeout: benchHTTPTimeout, Transport: &http.Transport{
		MaxIdleConns: clients, MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients, IdleConnTimeout: time.Minute,
	}}
}

// post sends body to url with headers and returns the answer's status,
// headers and body.
func post(ctx context.Context, client *http.Client, url string, body []byte, headers map[string]string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data, err
}

// oneLine shortens an answer's body for an error message.
func oneLine(body []byte) string {
	s := strings.Join(strings.Fields(string(body)), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// Webhooks runs bench webhooks: it times N signed Stripe events POSTed
// to serve's webhook endpoint, closed or open loop, which stores them
// (received), and the applier, until the inbox is empty (applied).
func Webhooks(ctx context.Context, cfg Config) error {
	b := newBench(cfg, "webhooks", "events", true)
	r, n := b.report, b.cfg.N
	st, err := b.begin(ctx)
	if err != nil {
		return err
	}
	events, fake, setup, err := b.pendingEvents(ctx, st)
	st.Close()
	if err != nil {
		return err
	}
	r.Setup = &setup

	before, err := b.counters(ctx)
	if err != nil {
		return err
	}
	secret := "whsec_payrecon_bench_" + randomHex(16)
	app, err := b.startApp(ctx, AppOptions{Webhooks: true, WebhookSecret: secret})
	if err != nil {
		return err
	}
	vs, err := b.open(ctx)
	if err != nil {
		app.stop()
		return err
	}
	client := benchClient(b.cfg.Clients)
	url := app.base + "/webhooks/stripe"
	var done atomic.Int64
	p := startProgress(b.cfg.Stderr, "webhooks", "events", n, done.Load)
	stopTimed, err := b.startTimed()
	if err != nil {
		p.end()
		vs.Close()
		app.stop()
		return err
	}
	applyFrom, applyCPU := time.Now(), ReadCPU()
	if !b.cfg.Backlog {
		app.apply()
	}
	d := drive(ctx, n, b.cfg.Clients, b.cfg.Rate, &done, func(ctx context.Context, i int) (string, error) {
		ev := events[i]
		// Signed at the moment it is sent, as Stripe and the fake sign.
		status, _, body, err := post(ctx, client, url, ev.Payload, map[string]string{
			"Stripe-Signature": fakeprovider.SignatureHeader(ev.Payload, secret, time.Now()),
		})
		if err != nil {
			return "", err
		}
		if status != http.StatusOK {
			return "", fmt.Errorf("event %s: HTTP %d: %s", ev.ID, status, oneLine(body))
		}
		var answer struct{ Outcome string }
		if err := json.Unmarshal(body, &answer); err != nil || answer.Outcome == "" {
			return "", fmt.Errorf("event %s: an answer without an outcome: %s", ev.ID, oneLine(body))
		}
		return answer.Outcome, nil
	})
	p.end()
	if err := stopTimed(); err != nil {
		vs.Close()
		app.stop()
		return err
	}
	client.CloseIdleConnections()
	if b.cfg.Backlog {
		applyFrom, applyCPU = time.Now(), ReadCPU()
		app.apply()
	}
	applyErr := b.awaitEmptyInbox(ctx, vs, n)
	took := time.Since(applyFrom)
	r.AppliedCPU = CPUBetween(applyCPU, ReadCPU(), n)
	// The database's counters are read once every connection of the
	// measured phase ended: the read-back opens its own after.
	vs.Close()
	if err := app.stop(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.afterDrive(d, "signed events POSTed to /webhooks/stripe and stored")
	from := "from the first send"
	if b.cfg.Backlog {
		from = "from the applier's start, every event received"
	}
	applied := newPhase("events applied until the inbox was empty, "+from, n, took)
	r.Applied = &applied
	if applyErr != nil {
		r.Problems = append(r.Problems, applyErr.Error())
	}
	if got := d.outcomes[string(reconcile.EventReceived)]; got != n {
		r.Problems = append(r.Problems, fmt.Sprintf("%d of %d events received, want all", got, n))
	}
	after, err := b.counters(ctx)
	if err != nil {
		return err
	}
	if b.pg != nil {
		r.DB = b.pg.delta(before, after)
	}
	if vs, err = b.open(ctx); err != nil {
		return err
	}
	defer vs.Close()
	if err := b.applyLags(ctx, vs, events); err != nil {
		return err
	}

	ids := make([]string, len(events))
	for i, ev := range events {
		ids[i] = ev.PurchaseID
	}
	states, _, _, err := b.readBack(ctx, vs, ids)
	if err != nil {
		return err
	}
	b.expectSucceeded(states, n)
	r.Ledger = ledgerCheck(fake, ids)
	return b.finish()
}

// inboxStall is how long the webhook bench waits for the applier to
// apply one more event before it gives up: longer than the default
// backoff's longest wait (64 s), so that an event tried again is not
// taken for a stall.
const inboxStall = 2 * time.Minute

// awaitEmptyInbox waits until the inbox holds no pending event, and
// returns an error if the applier stopped making progress, or some
// events failed.
func (b *bench) awaitEmptyInbox(ctx context.Context, st *Store, n int) error {
	var applied atomic.Int64
	progress := startProgress(b.cfg.Stderr, "applier", "events", n, applied.Load)
	defer progress.end()
	last, lastAt := -1, time.Now()
	for {
		var backlog reconcile.InboxBacklog
		err := st.InTx(ctx, func(tx reconcile.Tx) error {
			var err error
			backlog, err = tx.InboxBacklog(ctx)
			return err
		})
		if err != nil {
			return err
		}
		applied.Store(int64(n - backlog.Pending))
		switch {
		case backlog.Pending == 0 && backlog.Failed > 0:
			return fmt.Errorf("%d events failed to apply", backlog.Failed)
		case backlog.Pending == 0:
			return nil
		case backlog.Pending != last:
			last, lastAt = backlog.Pending, time.Now()
		case time.Since(lastAt) > inboxStall:
			return fmt.Errorf("the applier stalled with %d events pending", backlog.Pending)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// applyLags reports each event's time from its receipt to its
// application, on the database's clock, and the share applied within a
// second.
func (b *bench) applyLags(ctx context.Context, st *Store, events []fakeprovider.WebhookEvent) error {
	lags := make([]time.Duration, 0, len(events))
	err := st.InTx(ctx, func(tx reconcile.Tx) error {
		lags = lags[:0]
		for _, ev := range events {
			row, err := tx.GetInboxEvent(ctx, "stripe", ev.ID)
			if err != nil {
				return err
			}
			lags = append(lags, row.ProcessedAt.Sub(row.ReceivedAt))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the inbox: %w", err)
	}
	within := 0
	for _, d := range lags {
		if d <= time.Second {
			within++
		}
	}
	b.report.Latency = append(b.report.Latency, summarise("received → applied", "on the database's clock: the receipt's commit to the applying transaction's clock reading", lags))
	b.report.Notes = append(b.report.Notes, fmt.Sprintf("%.2f%% of the events were applied within 1 s of their receipt", 100*float64(within)/float64(max(len(lags), 1))))
	return nil
}

// pendingEvents makes, not timed, the purchases the webhook bench needs:
// it creates them, and the worker charges each at the fake provider,
// which loses every reply, so that each purchase is uncertain with its
// charge made. Their payment_intent.succeeded events, as the fake renders
// them, are returned in the order of the purchases: applied, each moves
// its purchase uncertain → reconciling → succeeded.
func (b *bench) pendingEvents(ctx context.Context, st reconcile.Store) ([]fakeprovider.WebhookEvent, *fakeprovider.Fake, Phase, error) {
	n := b.cfg.N
	start := time.Now()
	fake := fakeprovider.New(fakeprovider.Config{Faults: fakeprovider.Faults{LostReply: 1}})
	// The server renders the event of every charge the fake makes, its
	// payload byte for byte as it would POST it; every event is dropped,
	// so that it sends none: the bench sends them, timed.
	srv := fakeprovider.NewServer(fake, fakeprovider.ServerConfig{
		WebhookURL: "http://127.0.0.1:9/webhooks/stripe", WebhookSecret: "whsec_unused",
		WebhookFaults: fakeprovider.WebhookFaults{Drop: 1}, TickEvery: -1, SyncDelivery: true, Logger: b.cfg.Log,
	})
	defer srv.Close()
	loader, err := b.service(st, fake, nil, nil)
	if err != nil {
		return nil, nil, Phase{}, err
	}
	ids, _, err := b.load(ctx, loader, "set-up: create")
	if err != nil {
		return nil, nil, Phase{}, err
	}
	obs := newBenchObserver()
	worker, err := b.service(st, fake, obs, func(c *reconcile.Config) {
		// No second look at an uncertain purchase while the bench runs:
		// the events must find them uncertain.
		c.Backoff = []time.Duration{24 * time.Hour}
	})
	if err != nil {
		return nil, nil, Phase{}, err
	}
	if _, err := b.work(ctx, worker, obs, obs.uncertain.Load, n, "set-up: charge, reply lost"); err != nil {
		return nil, nil, Phase{}, err
	}
	srv.Tick()
	byPurchase := map[string]fakeprovider.WebhookEvent{}
	for _, ev := range srv.Events() {
		if ev.Type == "payment_intent.succeeded" {
			byPurchase[ev.PurchaseID] = ev
		}
	}
	events := make([]fakeprovider.WebhookEvent, 0, n)
	for _, id := range ids {
		ev, ok := byPurchase[id]
		if !ok {
			return nil, nil, Phase{}, fmt.Errorf("set-up: the fake made no payment_intent.succeeded event for purchase %s", id)
		}
		events = append(events, ev)
	}
	phase := newPhase("purchases created and charged, the replies lost: uncertain, their payment_intent.succeeded events pending", n, time.Since(start))
	return events, fake, phase, nil
}

// API runs bench api: it times N purchases POSTed to serve's purchase
// API, closed or open loop.
func API(ctx context.Context, cfg Config) error {
	b := newBench(cfg, "api", "requests", true)
	r, n := b.report, b.cfg.N
	st, err := b.begin(ctx)
	if err != nil {
		return err
	}
	st.Close()

	before, err := b.counters(ctx)
	if err != nil {
		return err
	}
	token := randomHex(16)
	app, err := b.startApp(ctx, AppOptions{API: true, APIToken: "payrecon-bench:" + token})
	if err != nil {
		return err
	}
	client := benchClient(b.cfg.Clients)
	url := app.base + "/v1/purchases"
	run := randomHex(4) // keys of their own, run after run
	ids := make([]string, n)
	var done atomic.Int64
	p := startProgress(b.cfg.Stderr, "api", "requests", n, done.Load)
	stopTimed, err := b.startTimed()
	if err != nil {
		return err
	}
	d := drive(ctx, n, b.cfg.Clients, b.cfg.Rate, &done, func(ctx context.Context, i int) (string, error) {
		np := benchPurchase(i)
		body, err := json.Marshal(map[string]any{"customer": np.Customer, "amount": np.Amount, "currency": np.Currency, "description": np.Description})
		if err != nil {
			return "", err
		}
		status, header, answer, err := post(ctx, client, url, body, map[string]string{
			"Authorization":   "Bearer " + token,
			"Idempotency-Key": fmt.Sprintf("payrecon-bench-%s-%d", run, i),
		})
		if err != nil {
			return "", err
		}
		if status != http.StatusCreated {
			return "", fmt.Errorf("HTTP %d: %s", status, oneLine(answer))
		}
		var created struct{ ID string }
		if err := json.Unmarshal(answer, &created); err != nil || created.ID == "" {
			return "", fmt.Errorf("an answer without a purchase id: %s", oneLine(answer))
		}
		ids[i] = created.ID
		if header.Get("Idempotent-Replayed") != "" {
			return "201 replayed", nil
		}
		return "201 created", nil
	})
	p.end()
	if err := stopTimed(); err != nil {
		return err
	}
	client.CloseIdleConnections()
	if err := app.stop(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.afterDrive(d, "purchases created by POST /v1/purchases")
	if got := d.outcomes["201 created"]; got != n {
		r.Problems = append(r.Problems, fmt.Sprintf("%d of %d requests created a purchase, want all", got, n))
	}
	after, err := b.counters(ctx)
	if err != nil {
		return err
	}
	if b.pg != nil {
		r.DB = b.pg.delta(before, after)
	}

	// Not timed: the worker takes the new purchases to a final state, so
	// that the database holds final purchases only, and the ledger shows
	// whether each was charged once.
	var made []string
	for _, id := range ids {
		if id != "" {
			made = append(made, id)
		}
	}
	ws, err := b.open(ctx)
	if err != nil {
		return err
	}
	defer ws.Close()
	fake := fakeprovider.New(fakeprovider.Config{})
	obs := newBenchObserver()
	svc, err := b.service(ws, fake, obs, nil)
	if err != nil {
		return err
	}
	if _, err := b.work(ctx, svc, obs, obs.final.Load, len(made), "after: burn-down (not timed)"); err != nil {
		return err
	}
	r.Ledger = ledgerCheck(fake, made)
	r.Notes = append(r.Notes, "after the timed run the worker took the new purchases to a final state against the fake provider (not timed), for the ledger check")
	return b.finish()
}
