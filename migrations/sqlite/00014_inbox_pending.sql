-- Webhooks received, then applied. It mirrors
-- migrations/postgres/00016_inbox_pending.sql, without the notification:
-- on SQLite the applier is woken in-process, or polls.

-- +goose Up
ALTER TABLE webhook_inbox ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0);
ALTER TABLE webhook_inbox ADD COLUMN retry_at INTEGER NULL;
ALTER TABLE webhook_inbox ADD COLUMN last_error TEXT NOT NULL DEFAULT '';

CREATE INDEX webhook_inbox_pending_idx
    ON webhook_inbox (received_at, provider, event_id)
    WHERE outcome = 'pending';

CREATE INDEX webhook_inbox_failed_idx
    ON webhook_inbox (processed_at, provider, event_id)
    WHERE outcome = 'failed';

-- +goose Down
DROP INDEX webhook_inbox_failed_idx;
DROP INDEX webhook_inbox_pending_idx;
ALTER TABLE webhook_inbox DROP COLUMN last_error;
ALTER TABLE webhook_inbox DROP COLUMN retry_at;
ALTER TABLE webhook_inbox DROP COLUMN attempts;
