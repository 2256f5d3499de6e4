-- payrecon core schema for SQLite (3.47 or later: RAISE takes an
-- expression). It mirrors migrations/postgres/00001_core.sql.
--
-- The transition table of package statemachine is loaded into
-- allowed_transitions, and triggers refuse every write of purchases.state
-- that is not in it (and a purchase inserted in another state than
-- created), so that no SQL path (the store, a script, an operator's
-- sqlite3 shell) can record a forbidden move. The audit tables
-- (transitions, provider_attempts) are append-only: triggers refuse
-- UPDATE, DELETE and an INSERT OR REPLACE over an existing row.
--
-- SQLite has no SQLSTATEs: the triggers RAISE(ABORT, ...), which fails
-- the statement (not the transaction) with SQLITE_CONSTRAINT_TRIGGER, and
-- the message says which rule refused it (the Go store translates them):
--   'forbidden transition ...'    a forbidden move, or an insert in
--                                 another state than created
--   '<table> is append-only: ...' UPDATE or DELETE on an audit table
--
-- Tables are STRICT. Times are INTEGER microseconds since the Unix epoch,
-- UTC (time.Time.UnixMicro), NULL for the zero time; durations are
-- INTEGER nanoseconds; booleans INTEGER 0 or 1; JSON is TEXT.
-- Foreign keys need PRAGMA foreign_keys=ON, which the store sets on every
-- connection.

-- +goose Up

CREATE TABLE purchase_states (
    state TEXT NOT NULL PRIMARY KEY
) STRICT, WITHOUT ROWID;

INSERT INTO purchase_states (state) VALUES
    ('created'),
    ('submitted'),
    ('uncertain'),
    ('reconciling'),
    ('succeeded'),
    ('declined');

CREATE TABLE allowed_transitions (
    from_state TEXT NOT NULL REFERENCES purchase_states (state),
    to_state   TEXT NOT NULL REFERENCES purchase_states (state),
    PRIMARY KEY (from_state, to_state)
) STRICT, WITHOUT ROWID;

-- Exactly statemachine.Transitions(); a test compares the two.
INSERT INTO allowed_transitions (from_state, to_state) VALUES
    ('created', 'submitted'),
    ('submitted', 'uncertain'),
    ('submitted', 'succeeded'),
    ('submitted', 'declined'),
    ('uncertain', 'reconciling'),
    ('reconciling', 'uncertain'),
    ('reconciling', 'succeeded'),
    ('reconciling', 'declined');

CREATE TABLE purchases (
    id                  TEXT    NOT NULL PRIMARY KEY,
    customer            TEXT    NOT NULL,
    reference           TEXT    NULL,
    amount              INTEGER NOT NULL CHECK (amount > 0),
    currency            TEXT    NOT NULL,
    description         TEXT    NOT NULL DEFAULT '',
    payment_method      TEXT    NOT NULL DEFAULT '',
    state               TEXT    NOT NULL REFERENCES purchase_states (state),
    version             INTEGER NOT NULL,
    provider_key        TEXT    NULL UNIQUE,
    provider_request    TEXT    NULL CHECK (provider_request IS NULL OR json_valid(provider_request)),
    params_hash         TEXT    NULL,
    provider_payment_id TEXT    NULL UNIQUE,
    first_attempt_at    INTEGER NULL,
    uncertain_since     INTEGER NULL,
    escalated_at        INTEGER NULL,
    escalation_reason   TEXT    NULL,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL
) STRICT;

CREATE UNIQUE INDEX purchases_customer_reference_key
    ON purchases (customer, reference) WHERE reference IS NOT NULL;
CREATE INDEX purchases_escalated_at_idx
    ON purchases (escalated_at) WHERE escalated_at IS NOT NULL;
CREATE INDEX purchases_state_idx ON purchases (state);

-- +goose StatementBegin
CREATE TRIGGER purchases_guard_insert
BEFORE INSERT ON purchases
FOR EACH ROW
WHEN NEW.state IS NOT 'created'
BEGIN
    SELECT RAISE(ABORT, 'forbidden transition: purchase ' || coalesce(NEW.id, 'NULL') ||
        ' inserted in state ' || coalesce(NEW.state, 'NULL') || ', a purchase starts in created');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER purchases_guard_transition
BEFORE UPDATE OF state ON purchases
FOR EACH ROW
WHEN NEW.state IS NOT OLD.state AND NOT EXISTS (
    SELECT 1 FROM allowed_transitions
    WHERE from_state = OLD.state AND to_state = NEW.state
)
BEGIN
    SELECT RAISE(ABORT, 'forbidden transition ' || OLD.state || ' -> ' || coalesce(NEW.state, 'NULL') ||
        ' (purchase ' || OLD.id || ')');
END;
-- +goose StatementEnd

CREATE TABLE transitions (
    id          INTEGER NOT NULL PRIMARY KEY, -- the rowid: numbered in insertion order
    purchase_id TEXT    NOT NULL REFERENCES purchases (id),
    from_state  TEXT    NOT NULL,
    to_state    TEXT    NOT NULL,
    cause       TEXT    NOT NULL,
    evidence    TEXT    NOT NULL DEFAULT '',
    actor       TEXT    NOT NULL DEFAULT '',
    lease_token INTEGER NOT NULL DEFAULT 0,
    at          INTEGER NOT NULL
) STRICT;

CREATE INDEX transitions_purchase_idx ON transitions (purchase_id, id);

-- SQLite triggers are row triggers and it has no TRUNCATE (a DELETE
-- without WHERE fires them too): every row an UPDATE or DELETE would touch
-- refuses it, so the statement fails and changes nothing.

-- +goose StatementBegin
CREATE TRIGGER transitions_no_update
BEFORE UPDATE ON transitions
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'transitions is append-only: UPDATE refused');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER transitions_no_delete
BEFORE DELETE ON transitions
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'transitions is append-only: DELETE refused');
END;
-- +goose StatementEnd

-- INSERT OR REPLACE would delete the row it collides with without firing
-- the DELETE trigger (recursive_triggers is off): refuse the collision.
-- +goose StatementBegin
CREATE TRIGGER transitions_no_replace
BEFORE INSERT ON transitions
FOR EACH ROW
WHEN EXISTS (SELECT 1 FROM transitions WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'transitions is append-only: REPLACE of row ' || NEW.id || ' refused');
END;
-- +goose StatementEnd

CREATE TABLE provider_attempts (
    id          INTEGER NOT NULL PRIMARY KEY, -- the rowid: numbered in insertion order
    purchase_id TEXT    NOT NULL REFERENCES purchases (id),
    op          TEXT    NOT NULL,
    idem_key    TEXT    NOT NULL DEFAULT '',
    outcome     TEXT    NOT NULL,
    payment_id  TEXT    NOT NULL DEFAULT '',
    status      TEXT    NOT NULL DEFAULT '',
    latency_ns  INTEGER NOT NULL DEFAULT 0, -- time.Duration, exact
    error       TEXT    NOT NULL DEFAULT '',
    actor       TEXT    NOT NULL DEFAULT '',
    lease_token INTEGER NOT NULL DEFAULT 0,
    applied     INTEGER NOT NULL CHECK (applied IN (0, 1)),
    note        TEXT    NOT NULL DEFAULT '',
    at          INTEGER NOT NULL
) STRICT;

CREATE INDEX provider_attempts_purchase_idx ON provider_attempts (purchase_id, id);

-- +goose StatementBegin
CREATE TRIGGER provider_attempts_no_update
BEFORE UPDATE ON provider_attempts
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'provider_attempts is append-only: UPDATE refused');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER provider_attempts_no_delete
BEFORE DELETE ON provider_attempts
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'provider_attempts is append-only: DELETE refused');
END;
-- +goose StatementEnd

-- INSERT OR REPLACE would delete the row it collides with without firing
-- the DELETE trigger (recursive_triggers is off): refuse the collision.
-- +goose StatementBegin
CREATE TRIGGER provider_attempts_no_replace
BEFORE INSERT ON provider_attempts
FOR EACH ROW
WHEN EXISTS (SELECT 1 FROM provider_attempts WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'provider_attempts is append-only: REPLACE of row ' || NEW.id || ' refused');
END;
-- +goose StatementEnd

CREATE TABLE jobs (
    purchase_id      TEXT    NOT NULL PRIMARY KEY REFERENCES purchases (id),
    run_at           INTEGER NOT NULL,
    lease_owner      TEXT    NULL,
    lease_token      INTEGER NOT NULL DEFAULT 0,
    lease_expires_at INTEGER NULL,
    checks           INTEGER NOT NULL DEFAULT 0,
    done_at          INTEGER NULL,
    CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
) STRICT;

-- Claiming scans open jobs in run_at order.
CREATE INDEX jobs_claim_idx ON jobs (run_at, purchase_id) WHERE done_at IS NULL;

-- +goose Down

DROP TABLE jobs;
DROP TABLE provider_attempts;
DROP TABLE transitions;
DROP TABLE purchases;
DROP TABLE allowed_transitions;
DROP TABLE purchase_states;
