package http_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/provider/stripe"
	"github.com/payrecon/payrecon/reconcile"
	rhttp "github.com/payrecon/payrecon/reconcile/http"
	"github.com/payrecon/payrecon/reconcile/postgres"
	"github.com/payrecon/payrecon/statemachine"
)

// The group commit benchmarks: webhooks and purchase API requests through
// the real handlers (signature check and all), against a Postgres store
// on the server's own clock, with group commit on and off. They measure;
// they assert only that every request was answered 2xx. Point them at a
// durable server to see what group commit is for (the test clusters run
// with fsync off), and interleave them with pgbench on the same server so
// that both see the same machine:
//
//	PAYRECON_TEST_DATABASE_URL='postgres://postgres@/postgres?host=/tmp&port=55433' \
//	  go test ./reconcile/http -run '^$' -bench 'GroupCommit/webhooks/group' -benchtime 10000x
//
// Sub-benchmarks: webhooks and purchases (8 clients in a closed loop),
// webhooks-open (an open loop of 1,000 events/s, latency counted from
// each event's due time); each /group or /single. Each reports its rate,
// latency percentiles, requests per transaction (the mean group) and the
// CPU time per request of this process (clients and server) and, when the
// server runs here, of the server's processes. PAYRECON_BENCH_GROUP_MAX
// and PAYRECON_BENCH_GROUP_LEADERS override Config.GroupCommitMax and
// GroupCommitLeaders.

// benchClients is how many clients send at once in the closed loops.
const benchClients = 8

// benchOpenRate is the open loop's events per second.
const benchOpenRate = 1000

func BenchmarkGroupCommit(b *testing.B) {
	for _, mode := range []struct {
		name string
		off  bool
	}{{"group", false}, {"single", true}} {
		b.Run("webhooks/"+mode.name, func(b *testing.B) { benchWebhooks(b, mode.off, false) })
		b.Run("purchases/"+mode.name, func(b *testing.B) { benchPurchases(b, mode.off) })
		b.Run("webhooks-open/"+mode.name, func(b *testing.B) { benchWebhooks(b, mode.off, true) })
	}
}

// countingStore counts the transactions of the timed part: with group
// commit, requests per transaction is the mean group's size. cpu, when
// set, reads the CPU time the database server has used.
type countingStore struct {
	reconcile.Store
	txs atomic.Int64
	cpu func() time.Duration
}

func (s *countingStore) InTx(ctx context.Context, fn func(reconcile.Tx) error) error {
	s.txs.Add(1)
	return s.Store.InTx(ctx, fn)
}

// benchService returns a service over a fresh database of the test
// server, on the server's clock, with group commit on or off.
func benchService(b *testing.B, off bool) (*reconcile.Service, *countingStore) {
	b.Helper()
	cfg := reconcile.Config{GroupCommitOff: off, Logger: discardLogger()}
	if v := os.Getenv("PAYRECON_BENCH_GROUP_LEADERS"); v != "" {
		cfg.GroupCommitLeaders, _ = strconv.Atoi(v)
	}
	if v := os.Getenv("PAYRECON_BENCH_GROUP_MAX"); v != "" {
		cfg.GroupCommitMax, _ = strconv.Atoi(v)
	}
	url := pgtest.NewDatabase(b)
	pg, err := postgres.Open(context.Background(), postgres.Config{URL: url})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pg.Close() })
	if err := pg.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	st := &countingStore{Store: pg, cpu: serverCPU(b, url)}
	svc, err := reconcile.New(st, fakeprovider.New(fakeprovider.Config{}), cfg)
	if err != nil {
		b.Fatal(err)
	}
	return svc, st
}

// submittedPurchases stores n purchases in state submitted, each with its
// payment id pi_<i>, in a few large transactions (not timed).
func submittedPurchases(b *testing.B, st reconcile.Store, n int) []string {
	b.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	for start := 0; start < n; start += 1000 {
		err := st.InTx(ctx, func(tx reconcile.Tx) error {
			now, err := tx.Now(ctx)
			if err != nil {
				return err
			}
			for i := start; i < min(start+1000, n); i++ {
				p := reconcile.Purchase{
					ID: reconcile.NewID("pur_", time.Now()), Customer: "bench", Amount: 300, Currency: "usd",
					PaymentMethod: "pm_card_visa", State: statemachine.Created, Version: 1, CreatedAt: now, UpdatedAt: now,
				}
				if err := tx.InsertPurchase(ctx, p); err != nil {
					return err
				}
				next := p
				next.State, next.ProviderPaymentID, next.FirstAttemptAt = statemachine.Submitted, "pi_"+strconv.Itoa(i), now
				if err := tx.UpdatePurchase(ctx, next, statemachine.Created); err != nil {
					return err
				}
				ids[i] = p.ID
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return ids
}

func benchWebhooks(b *testing.B, off, open bool) {
	svc, st := benchService(b, off)
	v, err := stripe.NewWebhookVerifier(stripe.WebhookConfig{Secret: webhookSecret})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(rhttp.New(svc, rhttp.Config{Webhooks: map[string]rhttp.WebhookVerifier{"stripe": v}, Logger: discardLogger()}))
	b.Cleanup(srv.Close)
	ids := submittedPurchases(b, st.Store, b.N)
	payloads := make([][]byte, b.N)
	for i, id := range ids {
		payloads[i] = event("evt_"+strconv.Itoa(i), "payment_intent.succeeded", "pi_"+strconv.Itoa(i), "succeeded", id)
	}
	send := func(c *http.Client, i int) error {
		req, _ := http.NewRequest("POST", srv.URL+"/webhooks/stripe", bytes.NewReader(payloads[i]))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", sign(payloads[i], time.Now(), webhookSecret))
		return do(c, req, http.StatusOK)
	}
	if open {
		runOpen(b, send, st, "webhooks/s")
	} else {
		runClosed(b, send, st, "webhooks/s")
	}
}

func benchPurchases(b *testing.B, off bool) {
	svc, st := benchService(b, off)
	clients, err := rhttp.ParseAPITokens("shop:" + shopToken)
	if err != nil {
		b.Fatal(err)
	}
	api, err := rhttp.NewPurchaseAPI(svc, clients)
	if err != nil {
		b.Fatal(err)
	}
	s := rhttp.New(svc, rhttp.Config{Logger: discardLogger()})
	api.Register(s)
	srv := httptest.NewServer(s)
	b.Cleanup(srv.Close)
	runClosed(b, func(c *http.Client, i int) error {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/purchases", bytes.NewReader([]byte(coffee)))
		req.Header.Set("Authorization", "Bearer "+shopToken)
		req.Header.Set("Idempotency-Key", "bench-"+strconv.Itoa(i))
		return do(c, req, http.StatusCreated)
	}, st, "purchases/s")
}

func do(c *http.Client, req *http.Request, want int) error {
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	return nil
}

// runClosed sends b.N requests from benchClients clients, each sending its
// next request when its last one is answered.
func runClosed(b *testing.B, send func(*http.Client, int) error, st *countingStore, unit string) {
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: benchClients}}
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var wg sync.WaitGroup
	cpu := startCPU(st)
	b.ResetTimer()
	for range benchClients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				t0 := time.Now()
				if err := send(c, i); err != nil {
					b.Error(err)
					return
				}
				lat[i] = time.Since(t0)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu.report(b)
	report(b, lat, unit)
}

// runOpen sends b.N requests at benchOpenRate a second, whether or not the
// earlier ones were answered; each one's latency counts from its due time,
// so that a stall shows in every request it delays.
func runOpen(b *testing.B, send func(*http.Client, int) error, st *countingStore, unit string) {
	// Connections enough for a backlog of a quarter of a second; past it,
	// requests queue in the client, still counted from their due time.
	c := &http.Client{Transport: &http.Transport{MaxConnsPerHost: benchOpenRate / 4, MaxIdleConnsPerHost: benchOpenRate / 4}}
	lat := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	cpu := startCPU(st)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		due := start.Add(time.Duration(i) * time.Second / benchOpenRate)
		time.Sleep(time.Until(due)) // pacing the load, not synchronising
		wg.Go(func() {
			if err := send(c, i); err != nil {
				b.Error(err)
				return
			}
			lat[i] = time.Since(due)
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu.report(b)
	report(b, lat, unit)
}

// report adds the rate and the latency percentiles to the benchmark's
// line.
func report(b *testing.B, lat []time.Duration, unit string) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit)
	slices.Sort(lat)
	ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(ms(0.50), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
	b.ReportMetric(ms(1), "max-ms")
}

// cpuMark is where the timed part starts: transactions so far, and the
// CPU time of this process (the clients and the server under test) and
// of the database server.
type cpuMark struct {
	st      *countingStore
	app, db time.Duration
	haveDB  bool
}

func startCPU(st *countingStore) cpuMark {
	st.txs.Store(0)
	m := cpuMark{st: st, app: processCPU()}
	if st.cpu != nil {
		m.db, m.haveDB = st.cpu(), true
	}
	return m
}

// report adds requests per transaction (with group commit, the mean
// group's size) and the CPU time per request, of this process and of the
// database server: on a shared machine, a rate depends on the others'
// load, CPU time per request much less.
func (m cpuMark) report(b *testing.B) {
	n := float64(b.N)
	if txs := m.st.txs.Load(); txs > 0 {
		b.ReportMetric(n/float64(txs), "requests/tx")
	}
	b.ReportMetric(float64((processCPU()-m.app).Microseconds())/n, "app-cpu-us/req")
	if m.haveDB {
		b.ReportMetric(float64((m.st.cpu()-m.db).Microseconds())/n, "db-cpu-us/req")
	}
}

// processCPU is this process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU returns a reader of the CPU time used by every process of the
// database server at url (its postmaster's children: backends, WAL
// writer, checkpointer), or nil when the server's processes cannot be
// read from here (another machine, no /proc).
func serverCPU(b *testing.B, url string) func() time.Duration {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	var dir string
	if err := conn.QueryRow(ctx, `SELECT setting FROM pg_settings WHERE name = 'data_directory'`).Scan(&dir); err != nil || dir == "" {
		return nil
	}
	pidFile, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return nil
	}
	postmaster, _, _ := strings.Cut(string(pidFile), "\n")
	read := func() time.Duration {
		var ticks int64
		dirs, _ := os.ReadDir("/proc")
		for _, d := range dirs {
			stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
			if err != nil {
				continue
			}
			// After the command's closing parenthesis: state, ppid, ...,
			// utime and stime, the 12th and 13th.
			i := bytes.LastIndexByte(stat, ')')
			if i < 0 {
				continue
			}
			f := strings.Fields(string(stat[i+1:]))
			if len(f) < 13 || f[1] != strings.TrimSpace(postmaster) {
				continue
			}
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			ticks += u + s
		}
		return time.Duration(ticks) * (time.Second / 100) // USER_HZ
	}
	if read() == 0 {
		return nil
	}
	return read
}
