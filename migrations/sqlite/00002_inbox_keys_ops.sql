-- payrecon schema for SQLite, part 2: the webhook inbox, the purchase
-- API's idempotency keys, the operator audit and the sweep locks. It
-- mirrors migrations/postgres/00002 (same conventions as 00001_core.sql:
-- STRICT tables, times as INTEGER Unix microseconds in UTC, NULL for
-- none).
--
-- webhook_inbox and idempotency_keys are written with INSERT ... ON
-- CONFLICT DO NOTHING: their primary keys, not a read before the write,
-- decide whether an event or a key is new. operator_actions is
-- append-only, like the audit tables of 00001.

-- +goose Up

-- One row per provider event, unique by (provider, event_id): inserting
-- with ON CONFLICT DO NOTHING tells a new event from a redelivery.
CREATE TABLE webhook_inbox (
    provider     TEXT    NOT NULL CHECK (provider <> ''),
    event_id     TEXT    NOT NULL CHECK (event_id <> ''),
    type         TEXT    NOT NULL DEFAULT '',
    payload_hash TEXT    NOT NULL DEFAULT '',
    payload      BLOB    NOT NULL DEFAULT x'',
    object_id    TEXT    NOT NULL DEFAULT '', -- the provider object (payment id)
    result       TEXT    NOT NULL DEFAULT '', -- the neutral outcome the event reports
    -- The purchase named by the event's metadata or matched to it. Not a
    -- foreign key: an unmatched event may name a purchase that does not
    -- exist (yet).
    purchase_id  TEXT    NULL,
    outcome      TEXT    NOT NULL,
    received_at  INTEGER NOT NULL,
    processed_at INTEGER NULL,
    PRIMARY KEY (provider, event_id)
) STRICT;

-- Listing the unmatched events, oldest first.
CREATE INDEX webhook_inbox_outcome_idx ON webhook_inbox (outcome, received_at);
-- Listing a purchase's events.
CREATE INDEX webhook_inbox_purchase_idx ON webhook_inbox (purchase_id, received_at)
    WHERE purchase_id IS NOT NULL;
-- Retention.
CREATE INDEX webhook_inbox_received_at_idx ON webhook_inbox (received_at);

-- A purchase API client's idempotency keys, scoped per client, with the
-- response to replay.
CREATE TABLE idempotency_keys (
    client       TEXT    NOT NULL,
    key          TEXT    NOT NULL CHECK (key <> ''),
    request_hash TEXT    NOT NULL,
    status_code  INTEGER NOT NULL DEFAULT 0 CHECK (status_code >= 0),
    response     BLOB    NULL,
    -- Not a foreign key: the key only records the purchase its request
    -- created; retention deletes keys and never touches purchases.
    purchase_id  TEXT    NULL,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (client, key)
) STRICT;

-- Retention.
CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);

-- Who did what to a purchase, when, and what they saw first. Append-only,
-- like transitions and provider_attempts.
CREATE TABLE operator_actions (
    id          INTEGER NOT NULL PRIMARY KEY, -- the rowid: numbered in insertion order
    purchase_id TEXT    NOT NULL REFERENCES purchases (id),
    operator    TEXT    NOT NULL,
    action      TEXT    NOT NULL CHECK (action IN ('recheck', 'resolve', 'note')),
    saw         TEXT    NOT NULL DEFAULT '',
    did         TEXT    NOT NULL DEFAULT '',
    evidence    TEXT    NOT NULL DEFAULT '',
    at          INTEGER NOT NULL
) STRICT;

CREATE INDEX operator_actions_purchase_idx ON operator_actions (purchase_id, id);

-- +goose StatementBegin
CREATE TRIGGER operator_actions_no_update
BEFORE UPDATE ON operator_actions
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'operator_actions is append-only: UPDATE refused');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER operator_actions_no_delete
BEFORE DELETE ON operator_actions
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'operator_actions is append-only: DELETE refused');
END;
-- +goose StatementEnd

-- INSERT OR REPLACE would delete the row it collides with without firing
-- the DELETE trigger (recursive_triggers is off): refuse the collision.
-- +goose StatementBegin
CREATE TRIGGER operator_actions_no_replace
BEFORE INSERT ON operator_actions
FOR EACH ROW
WHEN EXISTS (SELECT 1 FROM operator_actions WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'operator_actions is append-only: REPLACE of row ' || NEW.id || ' refused');
END;
-- +goose StatementEnd

-- One row per named sweep; a row whose expires_at has passed is free.
CREATE TABLE sweep_locks (
    name       TEXT    NOT NULL PRIMARY KEY CHECK (name <> ''),
    owner      TEXT    NOT NULL CHECK (owner <> ''),
    expires_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- The rescue sweep claims only jobs whose lease expired: the few leased
-- open jobs, found without scanning every open job.
CREATE INDEX jobs_leased_idx ON jobs (lease_expires_at)
    WHERE lease_owner IS NOT NULL AND done_at IS NULL;

-- The metrics' oldest uncertain purchase and the overdue sweep read the
-- few purchases whose outcome is open.
CREATE INDEX purchases_uncertain_since_idx ON purchases (uncertain_since)
    WHERE state IN ('uncertain', 'reconciling');

-- +goose Down

DROP INDEX purchases_uncertain_since_idx;
DROP INDEX jobs_leased_idx;
DROP TABLE sweep_locks;
DROP TABLE operator_actions;
DROP TABLE idempotency_keys;
DROP TABLE webhook_inbox;
