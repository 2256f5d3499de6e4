-- payrecon: the order of the unmatched-events sweep, for PostgreSQL.
--
-- The sweep retries unmatched events least recently tried first: those
-- never processed, then by processed_at (which every retry sets), then
-- received_at, provider and event_id. Oldest received first instead let
-- events that never match (another environment's purchases on a shared
-- Stripe account) fill every batch and starve the newer ones.
--
-- The index is partial: only the few unmatched events, not the whole
-- inbox, and in the sweep's order, so that a batch is the first rows of
-- the index, without a sort. It replaces webhook_inbox_outcome_idx of
-- 00002, which only that sweep used.

-- +goose Up

CREATE INDEX webhook_inbox_unmatched_idx
    ON webhook_inbox (processed_at NULLS FIRST, received_at, provider, event_id)
    WHERE outcome = 'unmatched';
DROP INDEX webhook_inbox_outcome_idx;

-- +goose Down

CREATE INDEX webhook_inbox_outcome_idx ON webhook_inbox (outcome, received_at);
DROP INDEX webhook_inbox_unmatched_idx;
