-- The succeeded purchases that name no provider payment, by when they
-- were settled, for the audit from the provider's side.
--
-- The books say the money was taken, yet hold no payment id (an operator
-- resolved the purchase as succeeded against a live view that showed no
-- charge, or an answer that carried none): the audit asks the provider
-- for the purchase's payment in the chunk of the window that holds its
-- settled_at (reconcile.Tx.ListSucceededWithoutPayment). The index is
-- partial: only those few purchases, not every succeeded one.

-- +goose Up
CREATE INDEX purchases_succeeded_no_payment_idx ON purchases (settled_at, id)
    WHERE state = 'succeeded' AND provider_payment_id IS NULL;

-- +goose Down
DROP INDEX purchases_succeeded_no_payment_idx;
