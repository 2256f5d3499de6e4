package reconcile_test

import (
	"context"
	"errors"
	"testing"

	"github.com/payrecon/payrecon/internal/testing/stores"

	"github.com/payrecon/payrecon/fakeprovider"
	"github.com/payrecon/payrecon/reconcile"
)

// TestPurchaseClient: CreatePurchaseOnce records the API client that
// created a purchase, and ClientPurchase answers that client only: any
// other client, and every client for a purchase without one (made by
// CreatePurchase, as the CLI does), gets ErrNotFound, as for an unknown
// id. A reference another client used is refused without naming its
// purchase.
func TestPurchaseClient(t *testing.T) {
	stores.ForEach(t, func(t *testing.T, newStore stores.Factory) {
		f := setup(t, newStore, fakeprovider.Config{}, reconcile.Config{})
		ctx := context.Background()
		render := func(p reconcile.Purchase) (int, []byte, error) { return 201, []byte(p.ID), nil }
		np := reconcile.NewPurchase{Customer: "cus-1", Amount: 300, Currency: "usd", Reference: "order-1"}

		saved, err := f.svc.CreatePurchaseOnce(ctx, "shop", "key-1", "hash-1", np, render)
		if err != nil {
			t.Fatalf("CreatePurchaseOnce: %v", err)
		}
		if got := f.detail(saved.PurchaseID).Purchase.Client; got != "shop" {
			t.Fatalf("Client = %q, want shop", got)
		}
		cli := f.create("cus-1")
		if cli.Client != "" || f.detail(cli.ID).Purchase.Client != "" {
			t.Fatalf("a purchase made without the API has client %q", f.detail(cli.ID).Purchase.Client)
		}

		d, err := f.svc.ClientPurchase(ctx, "shop", saved.PurchaseID)
		if err != nil || d.Purchase.ID != saved.PurchaseID || len(d.Transitions) != 0 {
			t.Fatalf("ClientPurchase(shop, its own) = %+v, %v", d.Purchase, err)
		}
		for _, tc := range []struct{ client, id, what string }{
			{"billing", saved.PurchaseID, "another client's purchase"},
			{"", saved.PurchaseID, "no client"},
			{"shop", cli.ID, "a purchase without a client"},
			{"", cli.ID, "no client, a purchase without a client"},
			{"shop", "pur_unknown", "an unknown id"},
		} {
			if _, err := f.svc.ClientPurchase(ctx, tc.client, tc.id); !errors.Is(err, reconcile.ErrNotFound) {
				t.Errorf("%s: ClientPurchase(%q, %s) = %v, want ErrNotFound", tc.what, tc.client, tc.id, err)
			}
		}

		// The same reference for the same customer: the client that holds
		// it learns which purchase; another client only that it is taken.
		var conflict *reconcile.ReferenceConflictError
		_, err = f.svc.CreatePurchaseOnce(ctx, "shop", "key-2", "hash-2", np, render)
		if !errors.As(err, &conflict) || conflict.ExistingPurchaseID != saved.PurchaseID {
			t.Fatalf("shop reusing its reference: %v, want a conflict naming %s", err, saved.PurchaseID)
		}
		_, err = f.svc.CreatePurchaseOnce(ctx, "billing", "key-1", "hash-1", np, render)
		if !errors.As(err, &conflict) || conflict.ExistingPurchaseID != "" || !errors.Is(err, reconcile.ErrDuplicate) {
			t.Fatalf("billing reusing shop's reference: %v (%+v), want a conflict naming no purchase", err, conflict)
		}
	})
}
