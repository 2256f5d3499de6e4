-- The transactional outbox (issue 16): every change a downstream system
-- must act on writes its event here in the same transaction as the
-- change, and the relay sends it to each subscription until a 2xx.
--
--   * outbox_sequences holds, per purchase, the last sequence number given
--     to one of its events. The upsert that takes the next number locks
--     the purchase's row until commit, so a purchase's events are numbered
--     from 1 without gaps in the order they commit (a rolled-back change
--     gives its number back).
--
--   * outbox is one row per event: its id, what it is about, its type and
--     schema version, its sequence and the exact bytes every delivery
--     sends (events.Marshal) with the digest of its data. A row never
--     changes: the trigger refuses every UPDATE (SQLSTATE PR002). Rows are
--     deleted only by the retention sweep, once delivered.
--
--   * outbox_subscriptions are the endpoints: a URL, a signing secret and
--     the event types wanted ('' for all, else a comma-separated list).
--
--   * outbox_deliveries is one row per (subscription, event), written with
--     the event for every subscription that wants its type: pending until
--     a 2xx (done), or dead once the endpoint kept failing past the retry
--     window. A relay leases a row with a fencing token from
--     outbox_lease_tokens, as jobs are leased.
--
-- SQLSTATEs raised here (as in 00001):
--   PR002  a change to an outbox row

-- +goose Up

CREATE TABLE outbox_sequences (
    purchase_id   text   PRIMARY KEY,
    last_sequence bigint NOT NULL CHECK (last_sequence >= 1)
);

CREATE TABLE outbox (
    event_id       text        PRIMARY KEY,
    purchase_id    text        NOT NULL CHECK (purchase_id <> ''),
    refund_id      text        NOT NULL DEFAULT '',
    event_type     text        NOT NULL CHECK (event_type <> ''),
    schema_version integer     NOT NULL CHECK (schema_version >= 1),
    sequence       bigint      NOT NULL CHECK (sequence >= 1),
    payload        bytea       NOT NULL,
    digest         text        NOT NULL CHECK (digest <> ''),
    created_at     timestamptz NOT NULL,
    UNIQUE (purchase_id, sequence)
);

CREATE INDEX outbox_created_idx ON outbox (created_at, purchase_id, sequence);

-- +goose StatementBegin
CREATE FUNCTION outbox_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'outbox: event % is immutable: UPDATE refused', OLD.event_id
        USING ERRCODE = 'PR002';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER outbox_immutable
    BEFORE UPDATE ON outbox
    FOR EACH ROW EXECUTE FUNCTION outbox_immutable();

CREATE TABLE outbox_subscriptions (
    name        text        PRIMARY KEY CHECK (name <> ''),
    url         text        NOT NULL CHECK (url <> ''),
    secret      text        NOT NULL CHECK (secret <> ''),
    event_types text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL
);

CREATE SEQUENCE outbox_lease_tokens;

CREATE TABLE outbox_deliveries (
    subscription     text        NOT NULL REFERENCES outbox_subscriptions (name) ON DELETE CASCADE,
    event_id         text        NOT NULL REFERENCES outbox (event_id) ON DELETE CASCADE,
    purchase_id      text        NOT NULL,
    sequence         bigint      NOT NULL,
    state            text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done', 'dead')),
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL,
    window_from      timestamptz NOT NULL,
    lease_owner      text        NULL,
    lease_token      bigint      NULL,
    lease_expires_at timestamptz NULL,
    last_error       text        NOT NULL DEFAULT '',
    delivered_at     timestamptz NULL,
    created_at       timestamptz NOT NULL,
    PRIMARY KEY (subscription, event_id)
);

-- The open deliveries of a (subscription, purchase), in sequence order:
-- the claim takes only the first of each.
CREATE INDEX outbox_deliveries_open_idx ON outbox_deliveries (subscription, purchase_id, sequence)
    WHERE state <> 'done';
CREATE INDEX outbox_deliveries_due_idx ON outbox_deliveries (next_attempt_at)
    WHERE state = 'pending';
CREATE INDEX outbox_deliveries_event_idx ON outbox_deliveries (event_id);

-- +goose Down
DROP TABLE outbox_deliveries;
DROP SEQUENCE outbox_lease_tokens;
DROP TABLE outbox_subscriptions;
DROP TABLE outbox;
DROP FUNCTION outbox_immutable();
DROP TABLE outbox_sequences;
