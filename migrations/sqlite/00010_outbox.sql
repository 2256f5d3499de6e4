-- The transactional outbox (issue 16), as in migrations/postgres 00011
-- (see it for the what and why), in this dialect (see 00001_core.sql:
-- STRICT tables, times as INTEGER Unix microseconds in UTC, NULL for
-- none).
--
--   * outbox_sequences: the last sequence number of each purchase's
--     events. Writers are serialized, so the upsert that takes the next
--     number needs no lock of its own.
--   * outbox: one immutable row per event; a trigger refuses every UPDATE
--     (RAISE(ABORT, 'outbox: ... immutable ...')).
--   * outbox_subscriptions and outbox_deliveries, with the lease tokens
--     counted in outbox_lease_tokens (one row).

-- +goose Up

CREATE TABLE outbox_sequences (
    purchase_id   TEXT    NOT NULL PRIMARY KEY,
    last_sequence INTEGER NOT NULL CHECK (last_sequence >= 1)
) STRICT;

CREATE TABLE outbox (
    event_id       TEXT    NOT NULL PRIMARY KEY,
    purchase_id    TEXT    NOT NULL CHECK (purchase_id <> ''),
    refund_id      TEXT    NOT NULL DEFAULT '',
    event_type     TEXT    NOT NULL CHECK (event_type <> ''),
    schema_version INTEGER NOT NULL CHECK (schema_version >= 1),
    sequence       INTEGER NOT NULL CHECK (sequence >= 1),
    payload        BLOB    NOT NULL,
    digest         TEXT    NOT NULL CHECK (digest <> ''),
    created_at     INTEGER NOT NULL,
    UNIQUE (purchase_id, sequence)
) STRICT;

CREATE INDEX outbox_created_idx ON outbox (created_at, purchase_id, sequence);

-- +goose StatementBegin
CREATE TRIGGER outbox_immutable
BEFORE UPDATE ON outbox
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'outbox: event ' || OLD.event_id || ' is immutable: UPDATE refused');
END;
-- +goose StatementEnd

-- INSERT OR REPLACE would delete the row it collides with without firing
-- a DELETE trigger and write new bytes under the old id: an insert of an
-- id already stored is refused before the conflict is resolved.
-- +goose StatementBegin
CREATE TRIGGER outbox_no_replace
BEFORE INSERT ON outbox
FOR EACH ROW
WHEN EXISTS (SELECT 1 FROM outbox WHERE event_id = NEW.event_id)
BEGIN
    SELECT RAISE(ABORT, 'outbox: event ' || NEW.event_id || ' is immutable: REPLACE refused');
END;
-- +goose StatementEnd

CREATE TABLE outbox_subscriptions (
    name        TEXT    NOT NULL PRIMARY KEY CHECK (name <> ''),
    url         TEXT    NOT NULL CHECK (url <> ''),
    secret      TEXT    NOT NULL CHECK (secret <> ''),
    event_types TEXT    NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL
) STRICT;

CREATE TABLE outbox_lease_tokens (
    id   INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    last INTEGER NOT NULL
) STRICT;
INSERT INTO outbox_lease_tokens (id, last) VALUES (1, 0);

CREATE TABLE outbox_deliveries (
    subscription     TEXT    NOT NULL REFERENCES outbox_subscriptions (name) ON DELETE CASCADE,
    event_id         TEXT    NOT NULL REFERENCES outbox (event_id) ON DELETE CASCADE,
    purchase_id      TEXT    NOT NULL,
    sequence         INTEGER NOT NULL,
    state            TEXT    NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done', 'dead')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER NOT NULL,
    window_from      INTEGER NOT NULL,
    lease_owner      TEXT    NULL,
    lease_token      INTEGER NULL,
    lease_expires_at INTEGER NULL,
    last_error       TEXT    NOT NULL DEFAULT '',
    delivered_at     INTEGER NULL,
    created_at       INTEGER NOT NULL,
    PRIMARY KEY (subscription, event_id)
) STRICT;

CREATE INDEX outbox_deliveries_open_idx ON outbox_deliveries (subscription, purchase_id, sequence)
    WHERE state <> 'done';
CREATE INDEX outbox_deliveries_due_idx ON outbox_deliveries (next_attempt_at)
    WHERE state = 'pending';
CREATE INDEX outbox_deliveries_event_idx ON outbox_deliveries (event_id);

-- +goose Down
DROP TABLE outbox_deliveries;
DROP TABLE outbox_lease_tokens;
DROP TABLE outbox_subscriptions;
DROP TRIGGER outbox_no_replace;
DROP TRIGGER outbox_immutable;
DROP TABLE outbox;
DROP TABLE outbox_sequences;
