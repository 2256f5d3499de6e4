-- payrecon schema for SQLite, part 5: the API client that created a
-- purchase. It mirrors migrations/postgres/00005.
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
-- The Down drops the column (SQLite 3.35 or later; the CHECK is the
-- column's own, which does not prevent it).

-- +goose Up

ALTER TABLE purchases ADD COLUMN client TEXT NULL CHECK (client <> '');

-- +goose Down

ALTER TABLE purchases DROP COLUMN client;
