package crashtest

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/pgtest"
)

// chaosFaults are the fake's faults in the chaos test: creates lost,
// timed out, processing; refunds lost; webhooks duplicated, reordered,
// delayed, stale processing; redelivered quickly.
const chaosFaults = "lost_reply=0.1,timeout=0.05,processing=0.1,settle_after=500ms,refund_lost_reply=0.1,seed=11," +
	"webhook_duplicate=0.1,webhook_reorder=0.1,webhook_delay=0.1,webhook_stale_processing=0.1," +
	"webhook_tick=500ms,webhook_backoff=200ms,webhook_max_backoff=1s,webhook_attempts=100"

// slot is one process the chaos test keeps running: serve, or a worker.
type slot struct {
	name string // "serve", "worker-2"
	gen  int    // restarts under a new worker id
	p    *proc
}

// TestChaos runs serve and 4 workers against a Postgres cluster of its
// own and the fake over HTTP with faults, while purchases and refunds
// flow; it kills a random process with SIGKILL every 0.3 to 1.5 s and
// restarts it (under the same worker id or a new one), restarts Postgres
// once with pg_ctl restart -m immediate, and takes the provider down for
// 30 s once. Then it lets everything settle and checks the invariants,
// and the provider-side audit over the whole window must find nothing.
//
// It kills for -chaos.duration: by default 60 s and at least 60 kills
// under CI, 20 s otherwise.
func TestChaos(t *testing.T) {
	enabled(t)
	duration, minKills := 20*time.Second, 0
	if os.Getenv("CI") != "" {
		duration, minKills = 60*time.Second, 60
	}
	if *chaosDuration > 0 {
		duration = *chaosDuration
	}
	cluster := pgtest.NewCluster(t)
	e := newEnv(t, cluster.NewDatabase(t))
	r := &run{env: e, s: scenario{in: inServe}}
	e.j.add("run", "chaos for %s (at least %d kills), faults %s", duration, minKills, chaosFaults)
	if mig := e.start("migrate", nil); func() bool { <-mig.done; return mig.exitString() != "exited with status 0" }() {
		t.Fatalf("migrate %s", mig.exitString())
	}
	r.serveAddr = freeAddr(t)
	e.serve = "http://" + r.serveAddr
	e.startFake(chaosFaults, true, r.serveAddr)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 15))
	slots := []*slot{{name: "serve"}, {name: "worker-1"}, {name: "worker-2"}, {name: "worker-3"}, {name: "worker-4"}}
	startSlot := func(s *slot) {
		id := s.name
		if s.gen > 0 {
			id = fmt.Sprintf("%s-gen%d", s.name, s.gen)
		}
		if s.name == "serve" {
			s.p = e.start("serve", nil, e.protocolFlags("--addr", r.serveAddr, "--worker-id", id)...)
			e.awaitHealthy(s.p, e.serve, "/healthz")
			return
		}
		s.p = e.start("worker", nil, e.protocolFlags("--addr", freeAddr(t), "--worker-id", id)...)
	}
	for _, s := range slots {
		startSlot(s)
	}

	// The driver: purchases, and refunds of succeeded ones, all the while.
	stopDriving := make(chan struct{})
	var (
		mu       sync.Mutex
		calls    []*apiCall
		refunded = map[string]bool{}
		wg       sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 1; ; i++ {
			select {
			case <-stopDriving:
				return
			case <-time.After(100 * time.Millisecond):
			}
			body := fmt.Appendf(nil, `{"customer":"cus_chaos","amount":%d,"currency":"usd","description":"chaos %d"}`, 1000+i, i)
			c := r.call("/v1/purchases", fmt.Sprintf("chaos-purchase-%d", i), body)
			mu.Lock()
			calls = append(calls, c)
			var cand string
			if i%5 == 0 && len(calls) > 20 {
				if old := calls[len(calls)-20]; old.id != "" && !refunded[old.id] {
					cand = old.id
				}
			}
			mu.Unlock()
			if cand == "" {
				continue
			}
			var p purchaseDetail
			if code, err := e.getJSON(e.serve+"/v1/purchases/"+cand, &p); err != nil || code != http.StatusOK || p.State != "succeeded" {
				continue
			}
			rc := r.call("/v1/purchases/"+cand+"/refunds", "chaos-refund-"+cand, []byte(`{"amount":500,"reason":"requested_by_customer"}`))
			mu.Lock()
			refunded[cand] = true
			calls = append(calls, rc)
			mu.Unlock()
		}
	}()

	// The chaos.
	start := time.Now()
	kills, newIDs, ownExits := 0, 0, 0
	pgRestarted, outage := false, false
	for time.Since(start) < duration || kills < minKills {
		time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		for _, s := range slots {
			if s.p.exited() { // died by itself (Postgres restarting, …)
				ownExits++
				startSlot(s)
			}
		}
		switch el := time.Since(start); {
		case !pgRestarted && el > duration/3:
			pgRestarted = true
			e.j.add("chaos", "pg_ctl restart -m immediate")
			cluster.RestartImmediate(t)
			e.j.add("chaos", "Postgres is back")
		case !outage && el > duration/2:
			outage = true
			if code, b, err := postForm(e.fake+"/_fake/outage", "duration=30s"); err != nil || code != http.StatusOK {
				t.Fatalf("POST /_fake/outage: %d %s %v", code, b, err)
			}
			e.j.add("chaos", "the provider refuses every call for 30s")
		}
		s := slots[rng.IntN(len(slots))]
		e.kill(s.p)
		kills++
		if rng.IntN(2) == 0 {
			s.gen++
			newIDs++
		}
		startSlot(s)
	}
	close(stopDriving)
	wg.Wait()
	for _, s := range slots {
		if s.p.exited() {
			ownExits++
			startSlot(s)
		}
	}
	killed := time.Since(start)
	t.Logf("chaos: %d kills in %s (%d restarts under a new worker id), %d exits on their own restarted, Postgres restarted, a 30s provider outage",
		kills, killed.Round(time.Millisecond), newIDs, ownExits)

	// Settle: the outage ends, every request is answered on replay, every
	// purchase and refund settles.
	settleStart := time.Now()
	if outage {
		// The audit at the end asks the provider: wait out the outage.
		e.await("the provider's outage ends", 60*time.Second, func() bool { return providerUp(e) })
	}
	r.calls = calls
	r.replayAll()
	r.settle()
	settleTime := time.Since(settleStart)
	n := r.checkInvariants()
	r.auditClean()
	t.Logf("chaos: settled in %s after the kills stopped; invariants held over %s", settleTime.Round(time.Millisecond), n)
	if kills < minKills {
		t.Errorf("%d kills, want at least %d", kills, minKills)
	}
}

// postForm POSTs a form to a control endpoint of the fake.
func postForm(url, form string) (int, string, error) {
	resp, err := http.Post(url, "application/x-www-form-urlencoded", strings.NewReader(form))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = fmt.Fprint(&b, resp.Status)
	return resp.StatusCode, b.String(), nil
}

// providerUp reports whether the fake answers a call of its API (not a
// 503 of an outage).
func providerUp(e *env) bool {
	req, err := http.NewRequest(http.MethodGet, e.fake+"/v1/payment_intents?limit=1", nil)
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer "+stripeKey)
	resp, err := e.client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
