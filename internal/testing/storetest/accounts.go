package storetest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The tests of the provider account a purchase and an inbox event belong
// to: stored at insert on every insert path, read back on every read
// path, fixed afterwards, checked by the database, and listed.

// longAccount is the longest account provider.ParseAccount accepts.
var longAccount = "acct_" + strings.Repeat("z", 250)

// malformedAccounts are refused by provider.ParseAccount, and so by the
// database.
var malformedAccounts = []string{"acct_", "acct-1", "acct_1 2", "acct_1\n", "acct_é", "x", "ACCT_1", longAccount + "z"}

func testAccounts(t *testing.T, s *testStore) {
	const a, b = "acct_1StoreA", "acct_1StoreB"
	listAccounts := func() []string {
		t.Helper()
		var accounts []string
		inTx(t, s, func(tx reconcile.Tx) error {
			var err error
			accounts, err = tx.ListAccounts(t.Context())
			return err
		})
		return accounts
	}
	if got := listAccounts(); len(got) != 0 {
		t.Fatalf("the accounts of empty books: %v, want none", got)
	}

	platform := newPurchase("pur_platform")
	inA := newPurchase("pur_a")
	inA.Account = a
	long := newPurchase("pur_long")
	long.Account = longAccount
	for _, p := range []reconcile.Purchase{platform, inA, long} {
		insertPurchase(t, s, p)
		equal(t, "purchase "+p.ID, getPurchase(t, s, p.ID), p)
	}
	if got := listAccounts(); len(got) != 2 || got[0] != a || got[1] != longAccount {
		t.Fatalf("the books' accounts: %v, want %s and the long one", got, a)
	}

	// The purchase API's set-based insert stores it too.
	keyed := keyedPurchase("shop", "key-b", "pur_b")
	keyed.Purchase.Account = b
	inTx(t, s, func(tx reconcile.Tx) error {
		_, err := insertKeyed(t, tx, keyed)
		return err
	})
	wantCreated(t, s, keyed)
	equal(t, "the books' accounts", listAccounts(), []string{a, b, longAccount})

	// A malformed account is refused, on both insert paths, nothing
	// stored.
	for _, bad := range malformedAccounts {
		p := newPurchase("pur_bad")
		p.Account = bad
		err := txErr(t, s, func(tx reconcile.Tx) error { return tx.InsertPurchase(t.Context(), p) })
		wantErr(t, "a purchase of account "+bad, err, reconcile.ErrInvalid)
		k := keyedPurchase("shop", "key-bad", "pur_bad")
		k.Purchase.Account = bad
		err = txErr(t, s, func(tx reconcile.Tx) error {
			_, err := insertKeyed(t, tx, k)
			return err
		})
		wantErr(t, "a keyed purchase of account "+bad, err, reconcile.ErrInvalid)
		wantNothing(t, s, "pur_bad")

		e := inboxEvent("evt_bad", base)
		e.Account = bad
		err = txErr(t, s, func(tx reconcile.Tx) error {
			_, err := tx.InsertInboxEvent(t.Context(), e)
			return err
		})
		wantErr(t, "an event of account "+bad, err, reconcile.ErrInvalid)
		err = txErr(t, s, func(tx reconcile.Tx) error {
			_, err := tx.InsertInboxEvents(t.Context(), []reconcile.InboxEvent{inboxEvent("evt_ok", base), e})
			return err
		})
		wantErr(t, "a batch with an event of account "+bad, err, reconcile.ErrInvalid)
		err = txErr(t, s, func(tx reconcile.Tx) error {
			_, _, err := tx.ReceiveInboxEvents(t.Context(), []reconcile.InboxEvent{e})
			return err
		})
		wantErr(t, "a received event of account "+bad, err, reconcile.ErrInvalid)
		for _, id := range []string{"evt_bad", "evt_ok"} {
			wantErr(t, "event "+id, getEventErr(t, s, "stripe", id), reconcile.ErrNotFound)
		}
	}

	// Fixed at insert: an update leaves it as stored, and so do a claim
	// and a batched move.
	next := inA
	next.Account = b
	next.State = statemachine.Submitted
	next.UpdatedAt = at(1)
	equal(t, "the account after an update", update(t, s, next, statemachine.Created).Account, a)
	// The claim checks that each lease's purchase is the stored one,
	// account and all (pur_b's job is due too).
	insertJob(t, s, long.ID, base)
	leases := claim(t, s, "w1", 10, at(time.Second), time.Minute)
	i := slices.IndexFunc(leases, func(l reconcile.Lease) bool { return l.JobID() == long.ID })
	if i < 0 {
		t.Fatalf("ClaimJobs: %v, want the job of %s among them", ids(leases), long.ID)
	}
	m := move(leases[i], long, statemachine.Submitted, at(2*time.Second))
	m.To.Account = b
	equal(t, "the batched move", applyMoves(t, s, []reconcile.Move{m}), []bool{true})
	equal(t, "the account after a batched move", getPurchase(t, s, long.ID).Account, longAccount)

	// An inbox event keeps its account on each insert path and each read.
	one := inboxEvent("evt_acct_one", base)
	one.Account = a
	insertEvent(t, s, one)
	equal(t, "an inserted event's account", getEvent(t, s, "stripe", one.EventID).Account, a)
	batch := []reconcile.InboxEvent{inboxEvent("evt_acct_batch", base), inboxEvent("evt_acct_platform", base)}
	batch[0].Account = b
	inTx(t, s, func(tx reconcile.Tx) error {
		_, err := tx.InsertInboxEvents(t.Context(), batch)
		return err
	})
	received := inboxEvent("evt_acct_received", base)
	received.Account = a
	inTx(t, s, func(tx reconcile.Tx) error {
		_, _, err := tx.ReceiveInboxEvents(t.Context(), []reconcile.InboxEvent{received})
		return err
	})
	equal(t, "a batch event's account", getEvent(t, s, "stripe", "evt_acct_batch").Account, b)
	equal(t, "a platform event's account", getEvent(t, s, "stripe", "evt_acct_platform").Account, "")
	equal(t, "a received event's account", getEvent(t, s, "stripe", "evt_acct_received").Account, a)
	var unmatched []reconcile.InboxEvent
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		unmatched, err = tx.ListUnmatchedEvents(t.Context(), 10)
		return err
	})
	accounts := map[string]string{}
	for _, e := range unmatched {
		accounts[e.EventID] = e.Account
	}
	equal(t, "the unmatched events' accounts", accounts, map[string]string{
		"evt_acct_one": a, "evt_acct_batch": b, "evt_acct_platform": "", "evt_acct_received": a,
	})
}

// testAccountClaims: the claims of one account (ClaimAccountJobs) and
// the accounts with work (DueAccounts), which a worker serving connected
// accounts shares its claims among.
func testAccountClaims(t *testing.T, s *testStore) {
	const a, b, c = "acct_1ClaimA", "acct_1ClaimB", "acct_1ClaimC"
	const leaseFor = 30 * time.Second
	of := func(id, account string, runAt time.Time) {
		t.Helper()
		p := newPurchase(id)
		p.Account = account
		insertPurchase(t, s, p)
		insertJob(t, s, id, runAt)
	}
	due := func(now time.Time, after string, limit int) []string {
		t.Helper()
		s.clock.Set(now)
		got, err := s.DueAccounts(t.Context(), after, limit)
		if err != nil {
			t.Fatalf("DueAccounts(%q, %d) at %s: %v", after, limit, now, err)
		}
		return got
	}
	claimOf := func(owner, account string, limit int, now time.Time) []reconcile.Lease {
		t.Helper()
		s.clock.Set(now)
		leases, err := s.ClaimAccountJobs(t.Context(), owner, account, limit, leaseFor)
		if err != nil {
			t.Fatalf("ClaimAccountJobs(%s, %s, %d) at %s: %v", owner, account, limit, now, err)
		}
		checkLeaseNow(t, s, leases, now)
		for _, l := range leases {
			if got := getPurchase(t, s, l.PurchaseID).Account; got != account {
				t.Errorf("ClaimAccountJobs(%s) leased %s, of account %q", account, l.JobID(), got)
			}
		}
		return leases
	}

	equal(t, "the accounts with work in empty books", len(due(at(time.Hour), "", 10)), 0)
	of("pur_p1", "", at(0))
	// Account a's backlog is older than anything else.
	for i, id := range []string{"pur_a1", "pur_a2", "pur_a3"} {
		of(id, a, base.Add(-time.Hour+time.Duration(i)*time.Second))
	}
	of("pur_b1", b, at(time.Second))
	of("pur_c1", c, at(time.Hour)) // not due yet

	now := at(time.Minute)
	equal(t, "the accounts with work", due(now, "", 10), []string{"", a, b})
	equal(t, "the first account with work", due(now, "", 1), []string{""})
	equal(t, "the accounts with work after a", due(now, a, 10), []string{b})
	equal(t, "the accounts with work after the last", len(due(now, b, 10)), 0)
	equal(t, "the accounts with work once c's is due", due(at(2*time.Hour), "", 10), []string{"", a, b, c})
	_, err := s.DueAccounts(t.Context(), "", 0)
	wantErr(t, "DueAccounts with limit 0", err, reconcile.ErrInvalid)

	// A claim of b is not held up by a's older backlog, and takes b's
	// alone; a claim of a takes a's oldest first.
	equal(t, "the claim of b", ids(claimOf("w1", b, 10, now)), []string{"pur_b1"})
	equal(t, "the claim of a", ids(claimOf("w1", a, 2, now)), []string{"pur_a1", "pur_a2"})
	equal(t, "the accounts with work after the claims", due(now, "", 10), []string{"", a})
	_, err = s.ClaimAccountJobs(t.Context(), "", a, 1, leaseFor)
	wantErr(t, "ClaimAccountJobs without an owner", err, reconcile.ErrInvalid)

	// A refund's job is its purchase's account's.
	paid := newPurchase("pur_b2")
	paid.Account = b
	insertPurchase(t, s, paid)
	paid = walkTo(t, s, paid.ID, statemachine.Submitted)
	paid.State, paid.ProviderPaymentID = statemachine.Succeeded, "pi_b2"
	update(t, s, paid, statemachine.Submitted)
	r := newRefund("ref_b2", paid.ID, "pi_b2", 10)
	r.ProviderRequest.Account = b
	r.ParamsHash = r.ProviderRequest.Hash()
	insertRefund(t, s, r)
	refundJob(t, s, r, at(2*time.Second))
	equal(t, "the accounts with work once b has a refund", due(now, "", 10), []string{"", a, b})
	equal(t, "a claim of a", ids(claimOf("w1", a, 10, now)), []string{"pur_a3"})
	equal(t, "the claim of b's refund", ids(claimOf("w2", b, 10, now)), []string{"ref_b2"})

	// A lease that expired makes its account due again, and its job is
	// taken over by a claim of the account.
	later := now.Add(leaseFor + time.Second)
	equal(t, "the accounts with expired leases", due(later, "", 10), []string{"", a, b})
	taken := claimOf("w3", a, 10, later)
	equal(t, "the takeover of a's jobs", ids(taken), []string{"pur_a1", "pur_a2", "pur_a3"})
	for _, l := range taken {
		if !l.TakenOver {
			t.Errorf("lease of %s after its lease expired: TakenOver false", l.JobID())
		}
	}

	// Accounts sort bytewise, whatever the database's locale: an upper
	// case letter before every lower case one, as the workers' cursor
	// expects.
	const lower, upper = "acct_1a", "acct_1Z"
	of("pur_lower", lower, at(0))
	of("pur_upper", upper, at(0))
	equal(t, "the accounts with work, mixed case", due(later, "", 10), []string{"", b, upper, lower})
	equal(t, "the accounts with work after the upper case one", due(later, upper, 10), []string{lower})
}
