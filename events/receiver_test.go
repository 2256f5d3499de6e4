package events_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/payrecon/payrecon/events"
	"github.com/payrecon/payrecon/internal/testing/pgtest"
	"github.com/payrecon/payrecon/internal/testing/testclock"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

var _ = stdlib.GetDefaultDriver // registers the "pgx" database/sql driver

const secret = "whsec_test"

var start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// backends are the shop databases every receiver test runs against.
var backends = []struct {
	name    string
	dialect events.Dialect
	open    func(t *testing.T) *sql.DB
}{
	{"sqlite", events.SQLite, func(t *testing.T) *sql.DB {
		t.Helper()
		path := filepath.Join(t.TempDir(), "shop.db")
		db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}},
	{"postgres", events.Postgres, func(t *testing.T) *sql.DB {
		t.Helper()
		db, err := sql.Open("pgx", pgtest.NewDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}},
}

// shop is a test shop: its database, with the receiver's tables and its
// own, and a receiver whose effect grants access.
type shop struct {
	t        *testing.T
	db       *sql.DB
	dialect  events.Dialect
	clock    *testclock.Clock
	receiver *events.Receiver
	server   *httptest.Server
	logs     *logBuffer

	mu   sync.Mutex
	gaps []string // "event_id after last", from OnGap
	fail map[string]int
}

// forEachBackend runs test once per backend, each on a fresh shop.
func forEachBackend(t *testing.T, test func(t *testing.T, s *shop)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			test(t, newShop(t, b.open(t), b.dialect))
		})
	}
}

// newShop migrates db, creates the shop's tables and starts a receiver
// behind an HTTP test server.
//
// The shop's effect writes a row into effects for every event it applies
// (no key: it counts how often an effect committed), and for a purchase
// that succeeded (purchase.succeeded, or purchase.resolved with outcome
// succeeded) grants access to the payload's product, under the business
// key (purchase_id, product).
func newShop(t *testing.T, db *sql.DB, d events.Dialect) *shop {
	t.Helper()
	s := &shop{t: t, db: db, dialect: d, clock: testclock.New(start), logs: &logBuffer{}, fail: map[string]int{}}
	ctx := t.Context()
	if err := events.Migrate(ctx, events.Config{DB: db, Dialect: d}); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`CREATE TABLE grants (purchase_id TEXT NOT NULL, product TEXT NOT NULL, event_id TEXT NOT NULL, PRIMARY KEY (purchase_id, product))`,
		`CREATE TABLE effects (event_id TEXT NOT NULL, purchase_id TEXT NOT NULL, sequence BIGINT NOT NULL)`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	r, err := events.NewReceiver(events.Config{
		DB:      db,
		Dialect: d,
		Secrets: []string{secret},
		Now:     s.clock.Now,
		Logger:  slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnGap: func(_ context.Context, ev events.Event, last int64) {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.gaps = append(s.gaps, fmt.Sprintf("%s after %d", ev.ID, last))
		},
	}, s.effect)
	if err != nil {
		t.Fatal(err)
	}
	s.receiver = r
	s.server = httptest.NewServer(faults{r})
	t.Cleanup(s.server.Close)
	return s
}

// effect is the shop's effect; see newShop. A fault in ctx (see faults)
// makes it fail or crash.
func (s *shop) effect(ctx context.Context, tx *sql.Tx, ev events.Event) error {
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO effects (event_id, purchase_id, sequence) VALUES (?, ?, ?)`), ev.ID, ev.PurchaseID, ev.Sequence); err != nil {
		return err
	}
	switch faultOf(ctx) {
	case failEffect:
		return errors.New("the shop's database said no")
	case crashInEffect:
		panic(http.ErrAbortHandler) // the process dies mid-transaction
	}
	s.mu.Lock()
	n := s.fail[ev.ID]
	if n > 0 {
		s.fail[ev.ID] = n - 1
	}
	s.mu.Unlock()
	if n > 0 {
		return errors.New("the shop's effect failed")
	}
	var data struct{ Product, Outcome string }
	if err := json.Unmarshal(ev.Data, &data); err != nil {
		return err
	}
	if ev.Type == events.PurchaseSucceeded || ev.Type == events.PurchaseResolved && data.Outcome == "succeeded" {
		_, err := tx.ExecContext(ctx, s.q(`INSERT INTO grants (purchase_id, product, event_id) VALUES (?, ?, ?) ON CONFLICT (purchase_id, product) DO NOTHING`),
			ev.PurchaseID, data.Product, ev.ID)
		return err
	}
	return nil
}

// q rewrites ? placeholders to $n for PostgreSQL.
func (s *shop) q(query string) string {
	if s.dialect != events.Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// count returns the result of a count(*) query.
func (s *shop) count(query string, args ...any) int {
	s.t.Helper()
	var n int
	if err := s.db.QueryRowContext(context.Background(), s.q(query), args...).Scan(&n); err != nil {
		s.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// lastSequence is the highest sequence the receiver recorded for purchase,
// -1 if none.
func (s *shop) lastSequence(purchase string) int64 {
	s.t.Helper()
	var n int64
	err := s.db.QueryRowContext(context.Background(), s.q(`SELECT last_sequence FROM payrecon_event_sequences WHERE consumer = ? AND purchase_id = ?`), events.DefaultConsumer, purchase).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return -1
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

// gapReports returns what OnGap was told.
func (s *shop) gapReports() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.gaps...)
}

// failNext makes the effect fail for the next n applications of id.
func (s *shop) failNext(id string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[id] = n
}

// event returns a valid event of purchase with data {"product": product}
// plus extra.
func event(t *testing.T, id string, typ events.Type, purchase string, seq int64, product string, extra ...string) events.Event {
	t.Helper()
	ev := events.Event{
		ID:            id,
		Type:          typ,
		SchemaVersion: events.SchemaVersion,
		PurchaseID:    purchase,
		Sequence:      seq,
		CreatedAt:     start.Add(time.Duration(seq) * time.Second),
	}
	data := map[string]string{"product": product}
	for i := 0; i+1 < len(extra); i += 2 {
		data[extra[i]] = extra[i+1]
	}
	if err := ev.SetData(data); err != nil {
		t.Fatal(err)
	}
	return ev
}

// reply is a delivery's answer; status 0 means no answer arrived (the
// connection broke).
type reply struct {
	status int
	body   struct {
		EventID string `json:"event_id"`
		Outcome string `json:"outcome"`
		Error   string `json:"error"`
		Message string `json:"message"`
	}
}

func (r reply) String() string {
	return fmt.Sprintf("%d %s%s %s", r.status, r.body.Outcome, r.body.Error, r.body.Message)
}

// send delivers a signed request and returns the answer. A broken
// connection is status 0, not a failure: the sender just does not know.
// A test error is status -1. Safe to call from several goroutines.
func (s *shop) send(req *http.Request) reply {
	s.t.Helper()
	resp, err := s.server.Client().Do(req)
	if err != nil {
		return reply{}
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &r.body); err != nil {
		s.t.Errorf("answer %d %q: %v", resp.StatusCode, b, err) // not Fatal: senders run in goroutines
		r.status = -1
	}
	return r
}

// deliver sends ev as attempt, signed now by the shop's clock, with fault.
func (s *shop) deliver(ev events.Event, attempt int, f fault) reply {
	s.t.Helper()
	req, err := events.NewRequest(context.Background(), s.server.URL, secret, ev, attempt, s.clock.Now())
	if err != nil {
		s.t.Errorf("NewRequest: %v", err) // not Fatal: senders run in goroutines
		return reply{status: -1}
	}
	if f != none {
		req.Header.Set(faultHeader, string(f))
	}
	return s.send(req)
}

// expect fails the test unless r has status and outcome-or-error want.
func expect(t *testing.T, what string, r reply, status int, want string) {
	t.Helper()
	if r.status != status || r.body.Outcome+r.body.Error != want {
		t.Fatalf("%s: %v; want %d %s", what, r, status, want)
	}
}

// logBuffer is a slog destination safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func TestMigrateIsIdempotentAndNamesItsTables(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			cfg := events.Config{DB: db, Dialect: b.dialect, InboxTable: "shop_inbox", SequenceTable: "shop_sequences"}
			for range 2 {
				if err := events.Migrate(t.Context(), cfg); err != nil {
					t.Fatal(err)
				}
			}
			for _, table := range []string{"shop_inbox", "shop_sequences"} {
				var n int
				if err := db.QueryRowContext(t.Context(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
					t.Errorf("%s: %v", table, err)
				}
			}
		})
	}
	for _, cfg := range []events.Config{
		{Dialect: "mysql"},
		{Dialect: events.SQLite, InboxTable: "inbox; DROP TABLE grants"},
		{Dialect: events.SQLite, InboxTable: "x", SequenceTable: "X"},
	} {
		if _, err := events.Schema(cfg); err == nil {
			t.Errorf("Schema(%+v): no error", cfg)
		}
	}
	ddl, err := events.Schema(events.Config{Dialect: events.Postgres, InboxTable: "shop.inbox"})
	if err != nil || !strings.Contains(ddl, "CREATE TABLE IF NOT EXISTS shop.inbox (") || !strings.Contains(ddl, "TIMESTAMPTZ") ||
		!strings.Contains(ddl, "CREATE TABLE IF NOT EXISTS "+events.DefaultSequenceTable+" (") {
		t.Errorf("Schema: %v\n%s", err, ddl)
	}
	if err := events.Migrate(t.Context(), events.Config{Dialect: events.SQLite}); err == nil {
		t.Error("Migrate without a DB: no error")
	}
}

func TestNewReceiverRefusesABadConfig(t *testing.T) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	effect := func(context.Context, *sql.Tx, events.Event) error { return nil }
	good := events.Config{DB: db, Dialect: events.SQLite, Secrets: []string{secret}}
	if _, err := events.NewReceiver(good, effect); err != nil {
		t.Fatalf("a good config: %v", err)
	}
	for name, change := range map[string]func(*events.Config){
		"no DB":              func(c *events.Config) { c.DB = nil },
		"no dialect":         func(c *events.Config) { c.Dialect = "" },
		"no secret":          func(c *events.Config) { c.Secrets = nil },
		"empty secret":       func(c *events.Config) { c.Secrets = []string{""} },
		"negative tolerance": func(c *events.Config) { c.Tolerance = -time.Second },
		"negative body size": func(c *events.Config) { c.MaxBodyBytes = -1 },
		"bad table name":     func(c *events.Config) { c.SequenceTable = "a b" },
	} {
		cfg := good
		change(&cfg)
		if _, err := events.NewReceiver(cfg, effect); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := events.NewReceiver(good, nil); err == nil {
		t.Error("no effect: no error")
	}
}

func TestReceiverAppliesOnceAndAcknowledgesRedeliveries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *shop) {
		ev := event(t, "evt_a", events.PurchaseSucceeded, "pur_1", 1, "course-1")
		expect(t, "first delivery", s.deliver(ev, 1, none), 200, "applied")
		s.clock.Advance(time.Minute)
		expect(t, "redelivery", s.deliver(ev, 2, none), 200, "duplicate")
		s.clock.Advance(time.Hour) // a replay much later, signed afresh
		expect(t, "replay", s.deliver(ev, 1, none), 200, "duplicate")
		if n := s.count(`SELECT count(*) FROM effects WHERE event_id = ?`, "evt_a"); n != 1 {
			t.Errorf("the effect committed %d times", n)
		}
		if n := s.count(`SELECT count(*) FROM grants WHERE purchase_id = ?`, "pur_1"); n != 1 {
			t.Errorf("%d grants", n)
		}
		var typ, purchase, digest string
		var seq int64
		if err := s.db.QueryRowContext(t.Context(), s.q(`SELECT event_type, purchase_id, sequence, digest FROM payrecon_event_inbox WHERE consumer = ? AND event_id = ?`),
			events.DefaultConsumer, "evt_a").Scan(&typ, &purchase, &seq, &digest); err != nil {
			t.Fatal(err)
		}
		if typ != string(ev.Type) || purchase != "pur_1" || seq != 1 || digest != ev.Digest {
			t.Errorf("inbox row: %s %s %d %s", typ, purchase, seq, digest)
		}
		if got := s.lastSequence("pur_1"); got != 1 {
			t.Errorf("last sequence %d, want 1", got)
		}
		// Apply, without HTTP, says the same.
		if out, err := s.receiver.Apply(t.Context(), ev); out != events.Duplicate || err != nil {
			t.Errorf("Apply: %s, %v", out, err)
		}
	})
}

func TestReceiverRefusesTheSameIDWithAnotherContent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *shop) {
		ev := event(t, "evt_a", events.PurchaseSucceeded, "pur_1", 1, "course-1")
		expect(t, "first delivery", s.deliver(ev, 1, none), 200, "applied")
		for name, other := range map[string]events.Event{
			"another payload":  event(t, "evt_a", events.PurchaseSucceeded, "pur_1", 1, "course-2"),
			"another type":     event(t, "evt_a", events.PurchaseDeclined, "pur_1", 1, "course-1"),
			"another purchase": event(t, "evt_a", events.PurchaseSucceeded, "pur_2", 1, "course-1"),
			"another sequence": event(t, "evt_a", events.PurchaseSucceeded, "pur_1", 2, "course-1"),
		} {
			expect(t, name, s.deliver(other, 2, none), 409, "conflict")
			if _, err := s.receiver.Apply(t.Context(), other); !errors.Is(err, events.ErrConflict) {
				t.Errorf("Apply, %s: %v, want ErrConflict", name, err)
			}
		}
		if n := s.count(`SELECT count(*) FROM effects`); n != 1 {
			t.Errorf("%d effects, want 1", n)
		}
		if n := s.count(`SELECT count(*) FROM grants WHERE product = ?`, "course-2"); n != 0 {
			t.Errorf("the conflicting payload granted access")
		}
		if got := s.lastSequence("pur_1"); got != 1 {
			t.Errorf("last sequence %d, want 1", got)
		}
		if s.lastSequence("pur_2") != -1 {
			t.Error("the conflict recorded a sequence for pur_2")
		}
		if !strings.Contains(s.logs.String(), "conflict") || !strings.Contains(s.logs.String(), "digest") {
			t.Errorf("the conflict is not logged with what differs:\n%s", s.logs)
		}
	})
}

func TestReceiverChecksTheSequence(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *shop) {
		first := event(t, "evt_1", events.PurchaseEscalated, "pur_1", 1, "course-1")
		third := event(t, "evt_3", events.PurchaseResolved, "pur_1", 3, "course-1", "outcome", "succeeded")
		second := event(t, "evt_2", events.FindingOpened, "pur_1", 2, "course-1")
		expect(t, "sequence 1", s.deliver(first, 1, none), 200, "applied")
		if got := s.gapReports(); len(got) != 0 {
			t.Errorf("gaps after sequence 1: %v", got)
		}
		// A filtered subscription skips sequence 2: a gap, accepted and reported.
		expect(t, "sequence 3 after 1", s.deliver(third, 1, none), 200, "applied")
		if got := s.gapReports(); len(got) != 1 || got[0] != "evt_3 after 1" {
			t.Errorf("gaps: %v, want [evt_3 after 1]", got)
		}
		// Sequence 2 arriving now is out of order: refused, every time.
		expect(t, "sequence 2 after 3", s.deliver(second, 1, none), 409, "out_of_order")
		expect(t, "sequence 2 again", s.deliver(second, 2, none), 409, "out_of_order")
		// An old event replayed under a new id: refused.
		replayed := event(t, "evt_1_again", events.PurchaseEscalated, "pur_1", 1, "course-1")
		expect(t, "sequence 1 under a new id", s.deliver(replayed, 1, none), 409, "out_of_order")
		same := event(t, "evt_3_again", events.PurchaseResolved, "pur_1", 3, "course-1", "outcome", "succeeded")
		if _, err := s.receiver.Apply(t.Context(), same); !errors.Is(err, events.ErrOutOfOrder) {
			t.Errorf("sequence 3 under a new id: %v, want ErrOutOfOrder", err)
		}
		// A redelivery of an applied event is a duplicate, not out of order.
		expect(t, "sequence 1 redelivered", s.deliver(first, 2, none), 200, "duplicate")
		// A refused event left nothing behind.
		if n := s.count(`SELECT count(*) FROM payrecon_event_inbox WHERE event_id IN (?, ?, ?)`, "evt_2", "evt_1_again", "evt_3_again"); n != 0 {
			t.Errorf("%d refused events in the inbox", n)
		}
		if n := s.count(`SELECT count(*) FROM effects`); n != 2 {
			t.Errorf("%d effects, want 2", n)
		}
		if got := s.lastSequence("pur_1"); got != 3 {
			t.Errorf("last sequence %d, want 3", got)
		}
		// A first event above 1 is a gap after 0; other purchases are apart.
		expect(t, "pur_2 sequence 2", s.deliver(event(t, "evt_p2", events.PurchaseSucceeded, "pur_2", 2, "course-1"), 1, none), 200, "applied")
		if got := s.gapReports(); len(got) != 2 || got[1] != "evt_p2 after 0" {
			t.Errorf("gaps: %v", got)
		}
		logs := s.logs.String()
		if !strings.Contains(logs, "out of order") || !strings.Contains(logs, "gap") {
			t.Errorf("the refusal and the gap are not logged:\n%s", logs)
		}
	})
}

func TestReceiverConsumersAreApart(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *shop) {
		ev := event(t, "evt_a", events.PurchaseSucceeded, "pur_1", 1, "course-1")
		expect(t, "access", s.deliver(ev, 1, none), 200, "applied")
		var mails int
		mail, err := events.NewReceiver(events.Config{DB: s.db, Dialect: s.dialect, Secrets: []string{secret}, Consumer: "mail", Now: s.clock.Now, Logger: slog.New(slog.DiscardHandler)},
			func(context.Context, *sql.Tx, events.Event) error { mails++; return nil })
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := mail.Apply(t.Context(), ev); err != nil {
				t.Fatal(err)
			}
		}
		if mails != 1 {
			t.Errorf("the mail consumer applied the event %d times, want 1", mails)
		}
	})
}

func TestReceiverRollsBackAFailedEffect(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *shop) {
		ev := event(t, "evt_a", events.PurchaseSucceeded, "pur_1", 1, "course-1")
		s.failNext("evt_a", 1)
		expect(t, "attempt 1", s.deliver(ev, 1, none), 500, "internal")
		expect(t, "attempt 2", s.deliver(ev, 2, failEffect), 500, "internal")
		for what, n := range map[string]int{
			"inbox rows": s.count(`SELECT count(*) FROM payrecon_event_inbox`),
			"effects":    s.count(`SELECT count(*) FROM effects`),
			"grants":     s.count(`SELECT count(*) FROM grants`),
		} {
			if n != 0 {
				t.Errorf("%d %s after a failed effect", n, what)
			}
		}
		if s.lastSequence("pur_1") > 0 {
			t.Error("a failed effect recorded its sequence")
		}
		if !strings.Contains(s.logs.String(), "said no") {
			t.Errorf("the effect's error is not logged:\n%s", s.logs)
		}
		expect(t, "attempt 3", s.deliver(ev, 3, none), 200, "applied")
		expect(t, "attempt 4", s.deliver(ev, 4, none), 200, "duplicate")
		if n := s.count(`SELECT count(*) FROM grants`); n != 1 {
			t.Errorf("%d grants", n)
		}
	})
}

func TestReceiverRefusesBadDeliveriesAndStoresNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *shop) {
		ev := event(t, "evt_a", events.PurchaseSucceeded, "pur_1", 1, "course-1")
		body, err := events.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		now := s.clock.Now()
		post := func(body []byte, header http.Header) *http.Request {
			req, err := http.NewRequest(http.MethodPost, s.server.URL, bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header = header
			return req
		}
		signed := func(sig string) http.Header {
			return http.Header{events.SignatureHeader: {sig}, events.EventIDHeader: {"evt_a"}, events.AttemptHeader: {"1"}}
		}
		// The payload changed, the digest not.
		badDigestBody := []byte(strings.Replace(string(body), `"course-1"`, `"course-9"`, 1))
		invalidBody := []byte(strings.Replace(string(body), `"sequence":1`, `"sequence":0`, 1))
		notJSON := []byte(`not json`)
		big := bytes.Repeat([]byte(" "), events.DefaultMaxBodyBytes+1)
		for _, tc := range []struct {
			name   string
			req    *http.Request
			status int
			code   string
		}{
			{"no signature", post(body, http.Header{}), 401, "no_signature"},
			{"wrong secret", post(body, signed(events.Sign("whsec_other", body, now))), 401, "signature_mismatch"},
			{"tampered body", post(badDigestBody, signed(events.Sign(secret, body, now))), 401, "signature_mismatch"},
			{"old timestamp", post(body, signed(events.Sign(secret, body, now.Add(-events.DefaultTolerance-time.Second)))), 401, "timestamp_outside_tolerance"},
			{"future timestamp", post(body, signed(events.Sign(secret, body, now.Add(events.DefaultTolerance+time.Second)))), 401, "timestamp_outside_tolerance"},
			{"malformed header", post(body, signed("v1=abc")), 400, "bad_signature_header"},
			{"signed, not JSON", post(notJSON, signed(events.Sign(secret, notJSON, now))), 400, "invalid_event"},
			{"signed, digest mismatch", post(badDigestBody, signed(events.Sign(secret, badDigestBody, now))), 400, "digest_mismatch"},
			{"signed, invalid event", post(invalidBody, signed(events.Sign(secret, invalidBody, now))), 400, "invalid_event"},
			{"Event-Id header not the body's", post(body, http.Header{events.SignatureHeader: {events.Sign(secret, body, now)}, events.EventIDHeader: {"evt_b"}}), 400, "event_id_mismatch"},
			{"too large", post(big, signed(events.Sign(secret, big, now))), 413, "body_too_large"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				expect(t, tc.name, s.send(tc.req), tc.status, tc.code)
			})
		}
		get, err := http.NewRequest(http.MethodGet, s.server.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.send(get); r.status != 405 {
			t.Errorf("GET: %v", r)
		}
		if n := s.count(`SELECT count(*) FROM payrecon_event_inbox`) + s.count(`SELECT count(*) FROM effects`) + s.count(`SELECT count(*) FROM payrecon_event_sequences`); n != 0 {
			t.Errorf("%d rows stored by refused deliveries", n)
		}
		if strings.Contains(s.logs.String(), secret) {
			t.Error("a secret was logged")
		}
		// And the genuine delivery still goes through; the Event-Id header is optional.
		expect(t, "the genuine delivery", s.send(post(body, http.Header{events.SignatureHeader: {events.Sign(secret, body, now)}})), 200, "applied")
	})
}

func TestReceiverAppliesConcurrentDuplicatesOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, s *shop) {
		ev := event(t, "evt_a", events.PurchaseSucceeded, "pur_1", 1, "course-1")
		const copies = 8
		replies := make([]reply, copies)
		var wg sync.WaitGroup
		for i := range copies {
			wg.Go(func() { replies[i] = s.deliver(ev, i+1, none) })
		}
		wg.Wait()
		outcomes := map[string]int{}
		for _, r := range replies {
			if r.status != 200 {
				t.Errorf("a copy: %v", r)
			}
			outcomes[r.body.Outcome]++
		}
		if outcomes["applied"] != 1 || outcomes["duplicate"] != copies-1 {
			t.Errorf("outcomes %v, want 1 applied and %d duplicates", outcomes, copies-1)
		}
		if n := s.count(`SELECT count(*) FROM effects`); n != 1 {
			t.Errorf("the effect committed %d times", n)
		}
	})
}

func TestReceiverAnswers500ForAnyEffectError(t *testing.T) {
	db := backends[0].open(t)
	if err := events.Migrate(t.Context(), events.Config{DB: db, Dialect: events.SQLite}); err != nil {
		t.Fatal(err)
	}
	r, err := events.NewReceiver(events.Config{DB: db, Dialect: events.SQLite, Secrets: []string{secret}, Now: func() time.Time { return start }, Logger: slog.New(slog.DiscardHandler)},
		func(context.Context, *sql.Tx, events.Event) error {
			return fmt.Errorf("the shop's own conflict: %w", events.ErrConflict)
		})
	if err != nil {
		t.Fatal(err)
	}
	ev := event(t, "evt_a", events.PurchaseSucceeded, "pur_1", 1, "course-1")
	req, err := events.NewRequest(t.Context(), "http://shop.example/", secret, ev, 1, start)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, req)
	if rec.Code != 500 {
		t.Errorf("an effect error wrapping ErrConflict: %d %s, want 500: the sender must retry", rec.Code, rec.Body)
	}
	if _, err := r.Apply(t.Context(), ev); !errors.Is(err, events.ErrConflict) || !strings.Contains(err.Error(), "effect") {
		t.Errorf("Apply: %v, want the effect's error, wrapped", err)
	}
}
