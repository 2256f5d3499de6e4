package storetest

import (
	"testing"

	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The tests of the provider account a purchase and an inbox event belong
// to: stored at insert on every insert path, fixed afterwards, checked by
// the database, and listed.

func testAccounts(t *testing.T, s *testStore) {
	const a, b = "acct_1StoreA", "acct_1StoreB"
	platform := newPurchase("pur_platform")
	inA := newPurchase("pur_a")
	inA.Account = a
	insertPurchase(t, s, platform)
	insertPurchase(t, s, inA)
	equal(t, "the platform's purchase", getPurchase(t, s, platform.ID), platform)
	equal(t, "a connected account's purchase", getPurchase(t, s, inA.ID), inA)

	// The purchase API's set-based insert stores it too.
	keyed := keyedPurchase("shop", "key-b", "pur_b")
	keyed.Purchase.Account = b
	inTx(t, s, func(tx reconcile.Tx) error {
		_, err := insertKeyed(t, tx, keyed)
		return err
	})
	equal(t, "a keyed purchase's account", getPurchase(t, s, "pur_b").Account, b)

	var accounts []string
	inTx(t, s, func(tx reconcile.Tx) error {
		var err error
		accounts, err = tx.ListAccounts(t.Context())
		return err
	})
	equal(t, "the books' accounts", accounts, []string{a, b})

	// A malformed account is refused, nothing stored.
	for _, bad := range []string{"acct_", "acct-1", "acct_1 2", "x"} {
		p := newPurchase("pur_bad_" + bad)
		p.Account = bad
		err := txErr(t, s, func(tx reconcile.Tx) error { return tx.InsertPurchase(t.Context(), p) })
		wantErr(t, "a purchase of account "+bad, err, reconcile.ErrInvalid)
	}

	// Fixed at insert: an update leaves it as stored.
	next := inA
	next.Account = b
	next.State = statemachine.Submitted
	next.UpdatedAt = at(1)
	equal(t, "the account after an update", update(t, s, next, statemachine.Created).Account, a)

	// An inbox event keeps its account on each insert path.
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
}
