-- A webhook about a refund is stored in the inbox as one: the event names
-- the provider's refund (object_id), the refund id its metadata carries
-- and the payment it returns money from, so that an unmatched refund event
-- is retried as a refund event (reconcile.InboxEvent.Refund).

-- +goose Up
ALTER TABLE webhook_inbox ADD COLUMN refund INTEGER NOT NULL DEFAULT 0 CHECK (refund IN (0, 1));
ALTER TABLE webhook_inbox ADD COLUMN refund_id TEXT NOT NULL DEFAULT '';
ALTER TABLE webhook_inbox ADD COLUMN refunded_payment TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE webhook_inbox DROP COLUMN refunded_payment;
ALTER TABLE webhook_inbox DROP COLUMN refund_id;
ALTER TABLE webhook_inbox DROP COLUMN refund;
