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
