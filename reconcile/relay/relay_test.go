package relay_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/events"
	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/reconcile/relay"
)

// shop is an endpoint that receives payrecon's events with the events
// package's Receiver over a SQLite database of its own, and records what
// it saw.
type shop struct {
	t        *testing.T
	db       *sql.DB
	receiver *events.Receiver
	secret   string
	srv      *httptest.Server

	// before runs first on each delivery; returning false answers 503
	// without the receiver seeing it.
	before func(r *http.Request) bool
	// after runs once the receiver answered (its status), before the
	// answer is sent; returning false replaces it with a 500 (the 2xx is
	// lost on its way back).
	after func(r *http.Request, status int) bool

	mu       sync.Mutex
	bodies   map[string][]byte // event id → the body every delivery of it carried
	inFlight map[string]int
	overlap  []string // events delivered twice at the same time
	statuses map[int]int
}

// newShop starts a shop receiving on its own httptest server, whose clock
// is now (the signature's tolerance is checked against it).
func newShop(t *testing.T, now func() time.Time) *shop {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "shop.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	s := &shop{t: t, db: db, secret: "whsec_test", bodies: map[string][]byte{}, inFlight: map[string]int{}, statuses: map[int]int{}}
	cfg := events.Config{DB: db, Dialect: events.SQLite, Secrets: []string{s.secret}, Now: now, Logger: discardLogger()}
	if err := events.Migrate(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE applied (event_id TEXT PRIMARY KEY, purchase_id TEXT NOT NULL, sequence INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	s.receiver, err = events.NewReceiver(cfg, func(ctx context.Context, tx *sql.Tx, ev events.Event) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO applied VALUES (?, ?, ?)`, ev.ID, ev.PurchaseID, ev.Sequence)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *shop) serve(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("Event-Id")
	s.mu.Lock()
	s.inFlight[id]++
	if s.inFlight[id] > 1 {
		s.overlap = append(s.overlap, id)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight[id]--
		s.mu.Unlock()
	}()
	if s.before != nil && !s.before(r) {
		s.record(http.StatusServiceUnavailable)
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	var body bytes.Buffer
	r.Body = readAndKeep(r, &body)
	rec := httptest.NewRecorder()
	s.receiver.ServeHTTP(rec, r)
	s.mu.Lock()
	if prev, ok := s.bodies[id]; ok && !bytes.Equal(prev, body.Bytes()) {
		s.t.Errorf("event %s delivered with two bodies:\n%s\n%s", id, prev, body.Bytes())
	}
	s.bodies[id] = bytes.Clone(body.Bytes())
	s.mu.Unlock()
	if s.after != nil && !s.after(r, rec.Code) {
		s.record(http.StatusInternalServerError)
		http.Error(w, "lost", http.StatusInternalServerError)
		return
	}
	s.record(rec.Code)
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// statusCounts returns how many answers of each status the shop gave.
func (s *shop) statusCounts() map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.statuses)
}

func (s *shop) record(status int) {
	s.mu.Lock()
	s.statuses[status]++
	s.mu.Unlock()
}

// readAndKeep returns r's body as a reader that also copies what it reads
// into buf.
func readAndKeep(r *http.Request, buf *bytes.Buffer) *teeBody {
	return &teeBody{r: r.Body, buf: buf}
}

type teeBody struct {
	r   interface{ Read([]byte) (int, error) }
	buf *bytes.Buffer
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.buf.Write(p[:n])
	return n, err
}
func (b *teeBody) Close() error { return nil }

// applied returns, per purchase, the sequences the shop applied, in the
// order it applied them.
func (s *shop) applied() map[string][]int64 {
	s.t.Helper()
	rows, err := s.db.Query(`SELECT purchase_id, sequence FROM applied ORDER BY rowid`)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]int64{}
	for rows.Next() {
		var p string
		var seq int64
		if err := rows.Scan(&p, &seq); err != nil {
			s.t.Fatal(err)
		}
		out[p] = append(out[p], seq)
	}
	return out
}

// subscribe adds the shop as subscription name.
func (s *shop) subscribe(t *testing.T, st reconcile.Store, name string) {
	t.Helper()
	if err := st.InTx(t.Context(), func(tx reconcile.Tx) error {
		return tx.InsertSubscription(t.Context(), reconcile.Subscription{Name: name, URL: s.srv.URL, Secret: s.secret})
	}); err != nil {
		t.Fatal(err)
	}
}

// writeEvents writes perPurchase events for each of n purchases,
// interleaved, each in its own transaction, and returns them by id.
func writeEvents(t *testing.T, st reconcile.Store, at time.Time, n, perPurchase int) map[string]reconcile.OutboxEvent {
	t.Helper()
	out := map[string]reconcile.OutboxEvent{}
	for k := range perPurchase {
		for i := range n {
			ev := events.Event{ID: events.NewID(), Type: events.Types[k%len(events.Types)], PurchaseID: fmt.Sprintf("pur_%03d", i), CreatedAt: at}
			if err := ev.SetData(map[string]int{"k": k}); err != nil {
				t.Fatal(err)
			}
			if err := st.InTx(t.Context(), func(tx reconcile.Tx) error {
				stored, err := tx.AppendOutbox(t.Context(), ev)
				for _, e := range stored {
					out[e.ID] = e
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

func outboxStats(t *testing.T, st reconcile.Store) reconcile.OutboxStats {
	t.Helper()
	var s reconcile.OutboxStats
	if err := st.InTx(t.Context(), func(tx reconcile.Tx) error {
		var err error
		s, err = tx.OutboxStats(t.Context())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

func newRelay(t *testing.T, st reconcile.Store, owner string, cfg relay.Config) *relay.Relay {
	t.Helper()
	cfg.Owner, cfg.Logger = owner, discardLogger()
	r, err := relay.New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// wantDeliveredInOrder checks that the shop applied every event once, in
// sequence order per purchase, each delivery of an event with its stored
// bytes.
func wantDeliveredInOrder(t *testing.T, s *shop, written map[string]reconcile.OutboxEvent) {
	t.Helper()
	want := map[string][]int64{}
	for _, e := range written {
		want[e.PurchaseID] = append(want[e.PurchaseID], e.Sequence)
	}
	for p := range want {
		slices.Sort(want[p])
	}
	got := s.applied()
	for p, seqs := range want {
		if !slices.Equal(got[p], seqs) {
			t.Errorf("purchase %s: applied %v, want %v", p, got[p], seqs)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, e := range written {
		if !bytes.Equal(s.bodies[id], e.Payload) {
			t.Errorf("event %s: delivered %s, stored %s", id, s.bodies[id], e.Payload)
		}
	}
	if len(s.overlap) > 0 {
		t.Errorf("events delivered twice at the same time: %v", s.overlap)
	}
}

// TestRelayDeliversThroughFailuresAndKills: an endpoint that fails, loses
// its 2xx answers, and a relay killed between its POST and recording the
// 2xx: every event reaches the shop (the events.Receiver, checking
// signatures and sequences) at least once and is applied once, in order
// per purchase, always with its id and stored bytes.
func TestRelayDeliversThroughFailuresAndKills(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		clock := newClock()
		st := newStore(t, clock.Now)
		s := newShop(t, clock.Now)
		s.subscribe(t, st, "shop")
		written := writeEvents(t, st, clock.Now(), 12, 4)

		var (
			calls   atomic.Int64
			kills   atomic.Int64
			mu      sync.Mutex
			cancels = map[string]context.CancelFunc{} // the relays' kill switches, by round
			callOf  = map[*http.Request]int64{}       // each request's own call number
		)
		// The relay delivers a batch's purchases concurrently, so each
		// request's faults follow its own call number, not the counter's
		// value when it answers (another request's, by then).
		s.before = func(r *http.Request) bool {
			n := calls.Add(1)
			if n%3 == 0 { // every third call: 503
				return false
			}
			mu.Lock()
			callOf[r] = n
			mu.Unlock()
			return true
		}
		s.after = func(r *http.Request, status int) bool {
			mu.Lock()
			n := callOf[r]
			delete(callOf, r)
			mu.Unlock()
			switch {
			case n%5 == 0: // the 2xx is lost on its way back
				return false
			case n%7 == 0 && r.Header.Get("Delivery-Attempt") == "1": // the relay dies now
				kills.Add(1)
				mu.Lock()
				cancels[r.Header.Get("X-Test-Round")]()
				mu.Unlock()
			}
			return true
		}
		cfg := relay.Config{Batch: 8, Timeout: 5 * time.Second, LeaseFor: time.Minute, MinBackoff: time.Second, MaxBackoff: 10 * time.Second}
		for round := 0; outboxStats(t, st).Pending > 0; round++ {
			if round > 500 {
				t.Fatalf("still pending after 500 rounds: %+v", outboxStats(t, st))
			}
			// A relay per round: a killed one never comes back.
			ctx, stop := context.WithCancel(t.Context())
			mu.Lock()
			cancels[fmt.Sprint(round)] = stop
			mu.Unlock()
			cfg.Client = &http.Client{Transport: roundHeader{fmt.Sprint(round)}}
			n, err := newRelay(t, st, fmt.Sprintf("relay-%d", round), cfg).RunOnce(ctx)
			stop()
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				clock.Advance(cfg.MaxBackoff + cfg.LeaseFor) // retries due, dead relays' leases expired
			}
		}
		if st := outboxStats(t, st); st.Dead != 0 {
			t.Fatalf("%d dead deliveries", st.Dead)
		}
		statuses := s.statusCounts()
		if kills.Load() == 0 || statuses[http.StatusServiceUnavailable] == 0 || statuses[http.StatusInternalServerError] == 0 {
			t.Fatalf("the test did not exercise its faults: %d kills, statuses %v", kills.Load(), statuses)
		}
		// A killed relay's request may still be in the shop's hands when
		// its lease expires and the next relay sends the event again.
		s.mu.Lock()
		s.overlap = nil
		s.mu.Unlock()
		wantDeliveredInOrder(t, s, written)
		t.Logf("%d events, %d calls, %d kills, statuses %v", len(written), calls.Load(), kills.Load(), statuses)
	})
}

// TestTwoRelaysNeverDeliverTheSameEventAtOnce: two relays over one store
// run concurrently against an endpoint that records, per event, how many
// deliveries are in flight: never two. With no failure, each event is
// delivered exactly once.
func TestTwoRelaysNeverDeliverTheSameEventAtOnce(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		clock := newClock()
		st := newStore(t, clock.Now)
		s := newShop(t, clock.Now)
		s.subscribe(t, st, "shop")
		written := writeEvents(t, st, clock.Now(), 30, 3)
		var wg sync.WaitGroup
		for _, owner := range []string{"relay-a", "relay-b"} {
			r := newRelay(t, st, owner, relay.Config{Batch: 4})
			wg.Go(func() {
				for outboxStats(t, st).Pending > 0 {
					if _, err := r.RunOnce(t.Context()); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		wantDeliveredInOrder(t, s, written)
		if got := s.statusCounts(); got[http.StatusOK] != len(written) || len(got) != 1 {
			t.Fatalf("statuses %v, want one 200 per event, %d", got, len(written))
		}
	})
}

// TestRelayDeadLettersAndReplay: an endpoint that keeps failing past the
// retry window moves its events to dead, the later events of the purchase
// with them, and nothing more is sent; a replay once it is fixed sends
// them all, in order, with their ids and bytes.
func TestRelayDeadLettersAndReplay(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		clock := newClock()
		st := newStore(t, clock.Now)
		s := newShop(t, clock.Now)
		s.subscribe(t, st, "shop")
		written := writeEvents(t, st, clock.Now(), 3, 3)
		var down atomic.Bool
		down.Store(true)
		s.before = func(*http.Request) bool { return !down.Load() }
		cfg := relay.Config{RetryWindow: time.Hour, MinBackoff: time.Minute, MaxBackoff: 10 * time.Minute}
		r := newRelay(t, st, "relay", cfg)
		for range 100 {
			if outboxStats(t, st).Pending == 0 {
				break
			}
			if _, err := r.RunOnce(t.Context()); err != nil {
				t.Fatal(err)
			}
			clock.Advance(cfg.MaxBackoff)
		}
		if got := outboxStats(t, st); got.Pending != 0 || got.Dead != len(written) {
			t.Fatalf("stats %+v, want all %d dead", got, len(written))
		}
		if len(s.applied()) != 0 {
			t.Fatal("the shop applied events while down")
		}
		down.Store(false)
		svc, err := reconcile.New(st, fakeprovider.New(fakeprovider.Config{Now: clock.Now}), reconcile.Config{Now: clock.Now, Logger: discardLogger()})
		if err != nil {
			t.Fatal(err)
		}
		n, err := svc.ReplayEvents(t.Context(), reconcile.Replay{DeadOnly: true})
		if err != nil || n != len(written) {
			t.Fatalf("replay: %d, %v; want %d", n, err, len(written))
		}
		for outboxStats(t, st).Pending > 0 {
			if _, err := r.RunOnce(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		wantDeliveredInOrder(t, s, written)
	})
}

// roundHeader marks each request with the test round whose relay sent
// it.
type roundHeader struct{ round string }

func (h roundHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Test-Round", h.round)
	return http.DefaultTransport.RoundTrip(r)
}
