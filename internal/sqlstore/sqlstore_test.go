package sqlstore_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/internal/sqlstore"
	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

const d sqlstore.Dialect = "sqlite"

var at = time.Date(2026, 1, 1, 12, 0, 0, 5000, time.FixedZone("UTC+1", 3600))

// TestErrorShapes: every error a store makes says its dialect and what
// failed, has the kind a caller classifies it by, and keeps a person's
// detail readable with reconcile.DetailOf.
func TestErrorShapes(t *testing.T) {
	driver := errors.New("constraint failed")
	for _, tc := range []struct {
		err    error
		text   string
		kind   reconcile.Kind
		detail string
	}{
		{d.Wrap(driver, reconcile.ErrDuplicate, "insert purchase pur_1"),
			"sqlite: insert purchase pur_1: duplicate: constraint failed", reconcile.KindDuplicate, ""},
		{d.Wrap(driver, nil, "insert purchase pur_1"),
			"sqlite: insert purchase pur_1: constraint failed", reconcile.KindInternal, ""},
		{d.MissingPurchase(driver, "insert job of pur_1"),
			"sqlite: insert job of pur_1: purchase not found: constraint failed", reconcile.KindNotFound, ""},
		{d.Missing(driver, "insert transition submitted -> failed of ref_1 (of pur_1)", "refund"),
			"sqlite: insert transition submitted -> failed of ref_1 (of pur_1): refund not found: constraint failed", reconcile.KindNotFound, ""},
		{d.NotFound("get purchase pur_1"), "sqlite: get purchase pur_1: not found", reconcile.KindNotFound, ""},
		{d.Conflict("update purchase pur_1", sqlstore.ConflictDetail(statemachine.Uncertain, 3, statemachine.Submitted, 2)),
			"sqlite: update purchase pur_1: conflict: state or version changed: it is uncertain at version 3, the write expected submitted at version 2",
			reconcile.KindConflict, "it is uncertain at version 3, the write expected submitted at version 2"},
		{d.LeaseLost(reconcile.Lease{PurchaseID: "pur_1", Owner: "w1", Token: 4}, sqlstore.NoSuchJob),
			`sqlite: check lease of job pur_1 (owner "w1", token 4): lease lost: no such job`, reconcile.KindLeaseLost, "no such job"},
		{d.LeaseLost(reconcile.Lease{Kind: reconcile.JobRefund, PurchaseID: "pur_1", RefundID: "ref_1", Owner: "w1", Token: 4}, sqlstore.NoSuchJob),
			`sqlite: check lease of job ref_1 (owner "w1", token 4): lease lost: no such job`, reconcile.KindLeaseLost, "no such job"},
		{d.CheckLimit("list unmatched events", 0),
			"sqlite: list unmatched events: invalid input: limit 0", reconcile.KindInvalid, "limit 0"},
	} {
		if got := tc.err.Error(); got != tc.text {
			t.Errorf("error text:\n got  %s\n want %s", got, tc.text)
		}
		if got := reconcile.KindOf(tc.err); got != tc.kind {
			t.Errorf("%v: kind %q, want %q", tc.err, got, tc.kind)
		}
		if got := reconcile.DetailOf(tc.err); got != tc.detail {
			t.Errorf("%v: detail %q, want %q", tc.err, got, tc.detail)
		}
	}
	if err := d.Wrap(driver, reconcile.ErrDuplicate, "x"); !errors.Is(err, driver) || !errors.Is(err, reconcile.ErrDuplicate) {
		t.Errorf("Wrap loses the driver's error or the kind: %v", err)
	}
}

func TestChecks(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string // "" for no error
	}{
		{"limit ok", d.CheckLimit("x", 1), ""},
		{"cap 0 is no cap", d.CheckCap("x", 0), ""},
		{"negative cap", d.CheckCap("x", -1), "sqlite: x: invalid input: limit -1"},
		{"claim ok", d.CheckClaim("claim jobs", "w1", 1, time.Second), ""},
		{"claim without owner", d.CheckClaim("claim jobs", "", 1, time.Second), "sqlite: claim jobs: invalid input: empty owner"},
		{"claim without limit", d.CheckClaim("claim jobs", "w1", 0, time.Second), "sqlite: claim jobs: invalid input: limit 0"},
		{"claim without lease", d.CheckClaim("claim jobs", "w1", 1, 0), "sqlite: claim jobs: invalid input: lease duration 0s"},
		{"lock without name", d.CheckSweepLock("", "w1", time.Second), "sqlite: acquire sweep lock: invalid input: empty name"},
		{"lock without owner", d.CheckSweepLock("audit", "", time.Second), "sqlite: acquire sweep lock audit: invalid input: empty owner"},
		{"lock without ttl", d.CheckSweepLock("audit", "w1", -time.Second), "sqlite: acquire sweep lock audit: invalid input: ttl -1s"},
		{"new finding closed", d.CheckNewFinding("insert", reconcile.Finding{ClosedBy: "ann"}),
			"sqlite: insert: invalid input: a new finding is open (ClosedAt, ClosedBy and CloseNote must be empty)"},
		{"close without operator", d.CheckCloseFinding("close finding 1", "", "n", at), "sqlite: close finding 1: invalid input: empty operator"},
		{"close without note", d.CheckCloseFinding("close finding 1", "ann", "", at), "sqlite: close finding 1: invalid input: empty note"},
		{"close without time", d.CheckCloseFinding("close finding 1", "ann", "n", time.Time{}), "sqlite: close finding 1: invalid input: zero time"},
		{"purchase job", d.CheckJob("insert job", reconcile.Job{PurchaseID: "pur_1"}), ""},
		{"purchase job by kind", d.CheckJob("insert job", reconcile.Job{Kind: reconcile.JobPurchase, PurchaseID: "pur_1"}), ""},
		{"refund job", d.CheckJob("insert job", reconcile.Job{Kind: reconcile.JobRefund, PurchaseID: "pur_1", RefundID: "ref_1"}), ""},
		{"purchase job naming a refund", d.CheckJob("insert job", reconcile.Job{PurchaseID: "pur_1", RefundID: "ref_1"}),
			`sqlite: insert job: invalid input: a purchase's job names refund "ref_1"`},
		{"refund job without its refund", d.CheckJob("insert job", reconcile.Job{Kind: reconcile.JobRefund, PurchaseID: "pur_1"}),
			"sqlite: insert job: invalid input: a refund's job needs its RefundID and PurchaseID"},
		{"unknown job kind", d.CheckJob("insert job", reconcile.Job{Kind: "payout", PurchaseID: "pur_1"}),
			`sqlite: insert job: invalid input: unknown job kind "payout"`},
	} {
		switch {
		case tc.want == "" && tc.err != nil:
			t.Errorf("%s: %v, want nil", tc.name, tc.err)
		case tc.want != "" && (tc.err == nil || tc.err.Error() != tc.want || !errors.Is(tc.err, reconcile.ErrInvalid)):
			t.Errorf("%s: %v, want %q (ErrInvalid)", tc.name, tc.err, tc.want)
		}
	}
}

// TestCheckMoves: a batch of ApplyMoves moves purchases only, each under
// its own purchase job's lease.
func TestCheckMoves(t *testing.T) {
	p := reconcile.Purchase{ID: "pur_1", State: statemachine.Created, Version: 1}
	next := p
	next.State = statemachine.Submitted
	ok := reconcile.Move{
		Lease: reconcile.Lease{Kind: reconcile.JobPurchase, PurchaseID: "pur_1", Owner: "w1", Token: 1},
		From:  p, To: next,
		Transition: &reconcile.TransitionRecord{PurchaseID: "pur_1", From: statemachine.Created, To: statemachine.Submitted},
		Attempt:    &reconcile.Attempt{PurchaseID: "pur_1"},
	}
	if err := sqlstore.CheckMoves([]reconcile.Move{ok}); err != nil {
		t.Fatalf("CheckMoves of a purchase's move: %v", err)
	}
	leaseless := ok
	leaseless.Lease = reconcile.Lease{}
	if err := sqlstore.CheckMoves([]reconcile.Move{leaseless}); err != nil {
		t.Fatalf("CheckMoves of a move without a lease that keeps the job: %v", err)
	}
	for name, mutate := range map[string]func(*reconcile.Move){
		"without a lease, completing the job": func(mv *reconcile.Move) {
			mv.Lease = reconcile.Lease{}
			mv.Job, mv.RunAt = reconcile.JobComplete, time.Unix(1, 0)
		},
		"under a refund job's lease": func(mv *reconcile.Move) {
			mv.Lease.Kind, mv.Lease.RefundID = reconcile.JobRefund, "ref_1"
		},
		"recording a refund's transition": func(mv *reconcile.Move) {
			tr := *mv.Transition
			tr.RefundID = "ref_1"
			mv.Transition = &tr
		},
		"recording a refund's attempt": func(mv *reconcile.Move) {
			a := *mv.Attempt
			a.RefundID = "ref_1"
			mv.Attempt = &a
		},
		"recording a dispute's transition": func(mv *reconcile.Move) {
			tr := *mv.Transition
			tr.DisputeID = "dsp_1"
			mv.Transition = &tr
		},
	} {
		mv := ok
		mutate(&mv)
		if err := sqlstore.CheckMoves([]reconcile.Move{mv}); err == nil {
			t.Errorf("CheckMoves of a move %s: no error", name)
		}
	}
}

func TestExplanations(t *testing.T) {
	l := reconcile.Lease{PurchaseID: "pur_1", Owner: "w1", Token: 4}
	if got := sqlstore.LeaseLostDetail(reconcile.Job{LeaseOwner: "w2", LeaseToken: 5}, l); got != `taken over: now held by "w2" with token 5` {
		t.Errorf("taken over: %q", got)
	}
	if got := sqlstore.LeaseLostDetail(reconcile.Job{LeaseOwner: "w1", LeaseToken: 4, LeaseExpiresAt: at}, l); got != "expired at 2026-01-01T11:00:00.000005Z" {
		t.Errorf("expired: %q", got)
	}
	if got := sqlstore.ClaimRefusal(reconcile.Job{DoneAt: at}, at); got != "it is done since 2026-01-01T11:00:00.000005Z" {
		t.Errorf("done: %q", got)
	}
	if got := sqlstore.ClaimRefusal(reconcile.Job{LeaseOwner: "w2", LeaseExpiresAt: at.Add(time.Second)}, at); got != `leased by "w2" until 2026-01-01T11:00:01.000005Z` {
		t.Errorf("leased: %q", got)
	}
	if got := sqlstore.ClaimRefusal(reconcile.Job{LeaseOwner: "w2", LeaseExpiresAt: at}, at); got != "" {
		t.Errorf("expired lease: %q, want none", got)
	}
	if got := sqlstore.ClosedDetail("ann", at); got != `closed by "ann" at 2026-01-01T11:00:00.000005Z` {
		t.Errorf("closed: %q", got)
	}
}

func TestValues(t *testing.T) {
	if sqlstore.NullString("") != nil || sqlstore.NullString("a") != "a" || sqlstore.DerefString(nil) != "" {
		t.Error("NullString/DerefString")
	}
	if sqlstore.NullBytes([]byte{}) != nil || sqlstore.NotNullBytes(nil) == nil || sqlstore.NilIfEmpty([]byte{}) != nil {
		t.Error("NullBytes/NotNullBytes/NilIfEmpty")
	}
	if v, err := sqlstore.MarshalRequest[string, provider.CreateRequest](nil); v != nil || err != nil {
		t.Errorf("MarshalRequest(nil) = %v, %v; want NULL", v, err)
	}
	req := &provider.CreateRequest{IdempotencyKey: "payrecon-pur_1", PurchaseID: "pur_1", Amount: 100, Currency: "eur"}
	raw, err := sqlstore.MarshalRequest[json.RawMessage](req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := sqlstore.UnmarshalRequest("pur_1", raw.(json.RawMessage))
	if err != nil || *got != *req {
		t.Errorf("round trip: %+v, %v; want %+v", got, err, req)
	}
	if got, err := sqlstore.UnmarshalRequest("pur_1", nil); got != nil || err != nil {
		t.Errorf("UnmarshalRequest(NULL) = %v, %v", got, err)
	}
	if _, err := sqlstore.UnmarshalRequest("pur_1", []byte("{")); err == nil {
		t.Error("UnmarshalRequest of bad JSON: no error")
	}
	if counts := sqlstore.StateCounts(); len(counts) != len(statemachine.States) {
		t.Errorf("StateCounts: %v", counts)
	}
	refundReq := &provider.RefundRequest{IdempotencyKey: "payrecon-ref_1", RefundID: "ref_1", PurchaseID: "pur_1", PaymentID: "pi_1", Amount: 40, Currency: "eur", Reason: "duplicate"}
	text, err := sqlstore.MarshalRequest[string](refundReq)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := sqlstore.UnmarshalRefundRequest("ref_1", []byte(text.(string))); err != nil || *got != *refundReq {
		t.Errorf("refund request round trip: %+v, %v; want %+v", got, err, refundReq)
	}
	if got, err := sqlstore.UnmarshalRefundRequest("ref_1", nil); got != nil || err != nil {
		t.Errorf("UnmarshalRefundRequest(NULL) = %v, %v", got, err)
	}
	if _, err := sqlstore.UnmarshalRefundRequest("ref_1", []byte("{")); err == nil || !strings.Contains(err.Error(), "ref_1") {
		t.Errorf("UnmarshalRefundRequest of bad JSON: %v, want an error naming ref_1", err)
	}
	counts := sqlstore.RefundStateCounts()
	if len(counts) != len(statemachine.Refund.States()) {
		t.Errorf("RefundStateCounts: %v", counts)
	}
	if _, ok := counts[statemachine.Failed]; !ok {
		t.Errorf("RefundStateCounts has no failed: %v", counts)
	}
	if counts := sqlstore.FindingCounts(); len(counts) != len(reconcile.FindingKinds) {
		t.Errorf("FindingCounts: %v", counts)
	}
}

// TestDisputeValues: an inbox event's dispute round-trips through its
// JSON, its times in UTC to the microsecond; none is NULL.
func TestDisputeValues(t *testing.T) {
	if b, err := sqlstore.EncodeDispute(nil); b != nil || err != nil {
		t.Errorf("EncodeDispute(nil) = %q, %v; want NULL", b, err)
	}
	if got, err := sqlstore.DecodeDispute(nil); got != nil || err != nil {
		t.Errorf("DecodeDispute(NULL) = %v, %v", got, err)
	}
	if _, err := sqlstore.DecodeDispute([]byte("{")); err == nil {
		t.Error("DecodeDispute of bad JSON: no error")
	}
	in := &provider.Dispute{ID: "du_1", PaymentID: "pi_1", ChargeID: "ch_1", PurchaseID: "pur_1", Amount: 100, Currency: "eur",
		Reason: "fraudulent", Status: provider.DisputeNeedsResponse, EvidenceDueBy: at.Add(999 * time.Nanosecond),
		ChargeRefundable: true, Withdrawn: 100, Reinstated: 40, Created: at}
	b, err := sqlstore.EncodeDispute(in)
	if err != nil {
		t.Fatal(err)
	}
	got, err := sqlstore.DecodeDispute(b)
	if err != nil {
		t.Fatal(err)
	}
	want := *in
	want.EvidenceDueBy, want.Created = at.UTC(), at.UTC()
	if *got != want || got.EvidenceDueBy.Location() != time.UTC {
		t.Errorf("round trip: %+v, want %+v", got, want)
	}
	if !in.EvidenceDueBy.Equal(at.Add(999 * time.Nanosecond)) {
		t.Error("EncodeDispute changed its argument")
	}
	empty, err := sqlstore.DecodeDispute([]byte(`{"id":"du_2"}`))
	if err != nil || !empty.EvidenceDueBy.IsZero() || !empty.Created.IsZero() {
		t.Errorf("a dispute without times: %+v, %v", empty, err)
	}
}
