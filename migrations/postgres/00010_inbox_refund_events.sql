-- A webhook about a refund is stored in the inbox as one: the event names
-- the provider's refund (object_id), the refund id its metadata carries
-- and the payment it returns money from, so that an unmatched refund event
-- is retried as a refund event (reconcile.InboxEvent.Refund).

-- +goose Up
ALTER TABLE webhook_inbox
    ADD COLUMN refund           boolean NOT NULL DEFAULT false,
    ADD COLUMN refund_id        text    NOT NULL DEFAULT '',
    ADD COLUMN refunded_payment text    NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE webhook_inbox
    DROP COLUMN refund,
    DROP COLUMN refund_id,
    DROP COLUMN refunded_payment;
