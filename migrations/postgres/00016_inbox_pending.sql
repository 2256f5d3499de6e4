-- payrecon: webhooks received, then applied, for PostgreSQL.
--
-- The webhook endpoint stores each verified event as 'pending' and
-- answers; the applier (reconcile.Service.ApplyPending) claims pending
-- events in batches, FOR UPDATE SKIP LOCKED, and applies them. An event
-- whose application fails is tried again after a backoff (retry_at),
-- and after the last try it is 'failed', for an operator, with its error.
--
-- The index is partial: only the pending events, oldest received first,
-- which is the applier's order.
--
-- Each statement that stores a pending event notifies the channel
-- payrecon_inbox, which wakes the appliers of every process (LISTEN).
-- NOTIFY is sent at commit and folds repeats within a transaction, so
-- a group of webhooks costs one notification.

-- +goose Up
ALTER TABLE webhook_inbox
    ADD COLUMN attempts   integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    ADD COLUMN retry_at   timestamptz NULL,
    ADD COLUMN last_error text        NOT NULL DEFAULT '';

CREATE INDEX webhook_inbox_pending_idx
    ON webhook_inbox (received_at, provider, event_id)
    WHERE outcome = 'pending';

CREATE INDEX webhook_inbox_failed_idx
    ON webhook_inbox (processed_at, provider, event_id)
    WHERE outcome = 'failed';

-- +goose StatementBegin
CREATE FUNCTION payrecon_inbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT FROM received WHERE outcome = 'pending') THEN
        PERFORM pg_notify('payrecon_inbox', '');
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER webhook_inbox_notify
    AFTER INSERT ON webhook_inbox
    REFERENCING NEW TABLE AS received
    FOR EACH STATEMENT EXECUTE FUNCTION payrecon_inbox_notify();

-- +goose Down
DROP TRIGGER webhook_inbox_notify ON webhook_inbox;
DROP FUNCTION payrecon_inbox_notify();
DROP INDEX webhook_inbox_failed_idx;
DROP INDEX webhook_inbox_pending_idx;
ALTER TABLE webhook_inbox
    DROP COLUMN last_error,
    DROP COLUMN retry_at,
    DROP COLUMN attempts;
