-- payrecon: the API client that created a purchase, for PostgreSQL.
--
-- purchases.client is the name of the purchase API client whose request
-- created the purchase (reconcile.Purchase.Client), the name its
-- idempotency keys are scoped by. GET /v1/purchases/{id} answers only
-- that client (404 to any other, as for an unknown id).
--
-- NULL is "no client": purchases made by the CLI, the demo, and every
-- row older than this migration, whose client nobody recorded. No API
-- client may read them. The empty string is refused, so that "none" has
-- one spelling. The column is fixed at insert: UpdatePurchase never
-- writes it.
--
-- No index: the column is read with the purchase, by its id.

-- +goose Up

ALTER TABLE purchases
    ADD COLUMN client text NULL CONSTRAINT purchases_client_not_empty CHECK (client <> '');

-- +goose Down

ALTER TABLE purchases DROP COLUMN client;
