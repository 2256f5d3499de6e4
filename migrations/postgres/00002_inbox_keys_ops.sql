-- payrecon: webhook inbox, purchase-API idempotency keys, operator audit
-- and sweep locks, for PostgreSQL.
--
-- webhook_inbox and idempotency_keys are written with INSERT ... ON
-- CONFLICT DO NOTHING: their primary keys, not a read before the write,
-- decide whether an event or a key is new, so concurrent deliveries of one
-- event (or retries of one request) cannot both be taken as the first.
-- operator_actions is append-only, like the audit tables of 00001 (same
-- trigger function, SQLSTATE PR002).

-- +goose Up

CREATE TABLE webhook_inbox (
    provider     text        NOT NULL CHECK (provider <> ''),
    event_id     text        NOT NULL CHECK (event_id <> ''),
    type         text        NOT NULL DEFAULT '',
    payload_hash text        NOT NULL DEFAULT '',
    payload      bytea       NOT NULL DEFAULT '',
    object_id    text        NOT NULL DEFAULT '', -- the provider object (payment id)
    result       text        NOT NULL DEFAULT '', -- the neutral outcome the event reports
    -- The purchase named by the event's metadata or matched to it. Not a
    -- foreign key: an unmatched event may name a purchase that does not
    -- exist (yet).
    purchase_id  text        NULL,
    outcome      text        NOT NULL,
    received_at  timestamptz NOT NULL,
    processed_at timestamptz NULL,
    PRIMARY KEY (provider, event_id)
);

-- Listing the unmatched events, oldest first.
CREATE INDEX webhook_inbox_outcome_idx ON webhook_inbox (outcome, received_at);
-- Listing a purchase's events.
CREATE INDEX webhook_inbox_purchase_idx ON webhook_inbox (purchase_id, received_at)
    WHERE purchase_id IS NOT NULL;
-- Retention.
CREATE INDEX webhook_inbox_received_at_idx ON webhook_inbox (received_at);

CREATE TABLE idempotency_keys (
    client       text        NOT NULL,
    key          text        NOT NULL CHECK (key <> ''),
    request_hash text        NOT NULL,
    status_code  integer     NOT NULL DEFAULT 0 CHECK (status_code >= 0),
    response     bytea       NULL,
    -- Not a foreign key: the key only records the purchase its request
    -- created; retention deletes keys and never touches purchases.
    purchase_id  text        NULL,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (client, key)
);

-- Retention.
CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);

CREATE TABLE operator_actions (
    id          bigserial   PRIMARY KEY,
    purchase_id text        NOT NULL REFERENCES purchases (id),
    operator    text        NOT NULL,
    action      text        NOT NULL CHECK (action IN ('recheck', 'resolve', 'note')),
    saw         text        NOT NULL DEFAULT '',
    did         text        NOT NULL DEFAULT '',
    evidence    text        NOT NULL DEFAULT '',
    at          timestamptz NOT NULL
);

CREATE INDEX operator_actions_purchase_idx ON operator_actions (purchase_id, id);

CREATE TRIGGER operator_actions_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON operator_actions
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_change();

-- One row per named sweep; a row whose expires_at has passed is free.
CREATE TABLE sweep_locks (
    name       text        PRIMARY KEY CHECK (name <> ''),
    owner      text        NOT NULL CHECK (owner <> ''),
    expires_at timestamptz NOT NULL
);

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
