-- payrecon schema for SQLite, part 4: settled purchases in doubt, the
-- audit from the provider's side, and a transition table the database
-- holds to. It mirrors migrations/postgres/00004 (same conventions as
-- 00001_core.sql: STRICT tables, times as INTEGER Unix microseconds in
-- UTC, NULL for none).
--
-- What and why:
--
--   * purchases.settled_at and purchases.doubt: when the answer that made
--     a purchase final was given (a contradicting event older than it is
--     stale, a newer one is confirmed with the provider), and why a final
--     state must be confirmed ('' when it need not).
--
--   * purchases_first_attempt_idx: the audit lists the succeeded
--     purchases first submitted within its window.
--
--   * audit_findings: what the audit from the provider's side found
--     (reconcile.Finding). One row per (provider, payment_id, kind),
--     written with INSERT ... ON CONFLICT DO NOTHING so that re-running an
--     audit never repeats a finding. purchase_id is not a foreign key: an
--     orphan charge names a purchase id the books do not know, or none
--     (NULL). A finding is evidence: it stays as found, and an operator
--     closes it once with a note. Triggers refuse any UPDATE but the one
--     that closes an open finding (closed_at, closed_by, close_note), and
--     DELETE. INSERT OR REPLACE would delete the row it collides with
--     without firing the DELETE trigger (recursive_triggers is off): a
--     collision on the id is refused, and an insert of a (provider,
--     payment_id, kind) already stored is ignored (RAISE(IGNORE), which is
--     what ON CONFLICT DO NOTHING does with it anyway), so the first
--     finding stays as it was.
--
--   * audit_links: the first money-taking payment the audit saw for a
--     purchase the books link to no payment, so that a second one is a
--     duplicate across chunks, runs and resumptions.
--
--   * audit_runs: the resumable watermark of each audit (reconcile.AuditRun).
--
--   * transitions gets a foreign key (from_state, to_state) to
--     allowed_transitions: the audit can record only moves of the
--     transition table, as purchases.state can only make them. SQLite
--     cannot add a constraint to a table, so transitions is rebuilt by
--     the procedure of https://www.sqlite.org/lang_altertable.html#otheralter
--     (create the new table, copy the rows, drop the old one, rename the
--     new one, recreate its index and its append-only triggers). Its
--     first step, turning foreign keys off, is left out: PRAGMA
--     foreign_keys cannot change inside the migration's transaction, and
--     need not: no table refers to transitions, so dropping it fires no
--     foreign key action. With foreign keys on (the store's connections)
--     every copied row is checked against both foreign keys, which takes
--     the place of the procedure's foreign_key_check. The rows keep their
--     ids (the order of the audit).
--
--   * allowed_transitions refuses INSERT, UPDATE and DELETE: the table is
--     statemachine.Transitions(), loaded by 00001, and changes only with
--     a migration (which drops the triggers for its change).
--
-- The triggers RAISE(ABORT, ...) (SQLITE_CONSTRAINT_TRIGGER) with these
-- messages:
--   'audit_findings: finding N is closed: UPDATE refused'
--   'audit_findings: only closing may change finding N: UPDATE refused'
--   'audit_findings is append-only: ...'
--   'allowed_transitions is read-only: ...'

-- +goose Up

ALTER TABLE purchases ADD COLUMN settled_at INTEGER NULL;
ALTER TABLE purchases ADD COLUMN doubt TEXT NOT NULL DEFAULT '';

-- What an event says of the payment's amount and currency and when the
-- provider created it, so that an event applied later (unmatched at
-- first) is judged as fully as one applied on arrival.
ALTER TABLE webhook_inbox ADD COLUMN amount INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_inbox ADD COLUMN currency TEXT NOT NULL DEFAULT '';
ALTER TABLE webhook_inbox ADD COLUMN event_created INTEGER NULL;

CREATE INDEX purchases_first_attempt_idx ON purchases (state, first_attempt_at)
    WHERE first_attempt_at IS NOT NULL;

CREATE TABLE audit_findings (
    id          INTEGER NOT NULL PRIMARY KEY, -- the rowid: numbered in insertion order
    provider    TEXT    NOT NULL CHECK (provider <> ''),
    payment_id  TEXT    NOT NULL CHECK (payment_id <> ''),
    kind        TEXT    NOT NULL CHECK (kind IN (
                    'orphan_charge', 'duplicate_charge', 'amount_mismatch',
                    'currency_mismatch', 'state_disagreement', 'missing_at_provider')),
    -- The purchase the finding concerns. Not a foreign key: an orphan
    -- names an unknown purchase id, or none (NULL).
    purchase_id TEXT    NULL,
    amount      INTEGER NOT NULL, -- the provider's payment's, minor units
    currency    TEXT    NOT NULL DEFAULT '',
    status      TEXT    NOT NULL DEFAULT '',
    evidence    TEXT    NOT NULL DEFAULT '',
    found_at    INTEGER NOT NULL,
    closed_at   INTEGER NULL,
    closed_by   TEXT    NOT NULL DEFAULT '',
    close_note  TEXT    NOT NULL DEFAULT '',
    UNIQUE (provider, payment_id, kind),
    -- Open: nobody closed it. Closed: by someone, with a note.
    CONSTRAINT audit_findings_closed_check CHECK (CASE
        WHEN closed_at IS NULL THEN closed_by = '' AND close_note = ''
        ELSE closed_by <> '' AND close_note <> ''
    END)
) STRICT;

-- The open findings, oldest first: the operator's list and the metrics.
CREATE INDEX audit_findings_open_idx ON audit_findings (found_at, id)
    WHERE closed_at IS NULL;
-- A purchase's findings.
CREATE INDEX audit_findings_purchase_idx ON audit_findings (purchase_id, found_at, id)
    WHERE purchase_id IS NOT NULL;

-- +goose StatementBegin
CREATE TRIGGER audit_findings_closed
BEFORE UPDATE ON audit_findings
FOR EACH ROW
WHEN OLD.closed_at IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'audit_findings: finding ' || OLD.id || ' is closed: UPDATE refused');
END;
-- +goose StatementEnd

-- Only closing an open finding may change it. A column added to the
-- table later must be added to this list.
-- +goose StatementBegin
CREATE TRIGGER audit_findings_only_close
BEFORE UPDATE ON audit_findings
FOR EACH ROW
WHEN OLD.closed_at IS NULL AND (
    NEW.closed_at IS NULL
    OR NEW.id IS NOT OLD.id
    OR NEW.provider IS NOT OLD.provider
    OR NEW.payment_id IS NOT OLD.payment_id
    OR NEW.kind IS NOT OLD.kind
    OR NEW.purchase_id IS NOT OLD.purchase_id
    OR NEW.amount IS NOT OLD.amount
    OR NEW.currency IS NOT OLD.currency
    OR NEW.status IS NOT OLD.status
    OR NEW.evidence IS NOT OLD.evidence
    OR NEW.found_at IS NOT OLD.found_at
)
BEGIN
    SELECT RAISE(ABORT, 'audit_findings: only closing may change finding ' || OLD.id || ': UPDATE refused');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER audit_findings_no_delete
BEFORE DELETE ON audit_findings
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'audit_findings is append-only: DELETE refused');
END;
-- +goose StatementEnd

-- An insert over a stored row: refused if it names its id, ignored if it
-- repeats its (provider, payment_id, kind). One trigger, so that the
-- first rule is checked first.
-- +goose StatementBegin
CREATE TRIGGER audit_findings_no_replace
BEFORE INSERT ON audit_findings
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'audit_findings is append-only: REPLACE of row ' || NEW.id || ' refused')
    WHERE EXISTS (SELECT 1 FROM audit_findings WHERE id = NEW.id);
    SELECT RAISE(IGNORE)
    WHERE EXISTS (
        SELECT 1 FROM audit_findings
        WHERE provider = NEW.provider AND payment_id = NEW.payment_id AND kind = NEW.kind
    );
END;
-- +goose StatementEnd

-- The first payment that took money the audit saw for a purchase the
-- books linked to no payment yet (its outcome still unknown): a second one
-- is a duplicate charge, whichever run, chunk or resumption sees it.
CREATE TABLE audit_links (
    provider    TEXT    NOT NULL CHECK (provider <> ''),
    purchase_id TEXT    NOT NULL CHECK (purchase_id <> ''),
    payment_id  TEXT    NOT NULL CHECK (payment_id <> ''),
    linked_at   INTEGER NOT NULL,
    PRIMARY KEY (provider, purchase_id)
) STRICT;

CREATE TABLE audit_runs (
    name         TEXT    NOT NULL PRIMARY KEY CHECK (name <> ''),
    window_from  INTEGER NULL,
    window_until INTEGER NULL,
    done_until   INTEGER NULL, -- everything created before it has been matched
    started_at   INTEGER NULL,
    updated_at   INTEGER NULL,
    findings     INTEGER NOT NULL DEFAULT 0 CHECK (findings >= 0)
) STRICT, WITHOUT ROWID;

-- Rebuild transitions with the foreign key to allowed_transitions. The
-- table, its index and its triggers are those of 00001 but for the new
-- constraint.

CREATE TABLE transitions_new (
    id          INTEGER NOT NULL PRIMARY KEY, -- the rowid: numbered in insertion order
    purchase_id TEXT    NOT NULL REFERENCES purchases (id),
    from_state  TEXT    NOT NULL,
    to_state    TEXT    NOT NULL,
    cause       TEXT    NOT NULL,
    evidence    TEXT    NOT NULL DEFAULT '',
    actor       TEXT    NOT NULL DEFAULT '',
    lease_token INTEGER NOT NULL DEFAULT 0,
    at          INTEGER NOT NULL,
    FOREIGN KEY (from_state, to_state) REFERENCES allowed_transitions (from_state, to_state)
) STRICT;

INSERT INTO transitions_new (id, purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at)
SELECT id, purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at FROM transitions;

-- Drops its index and triggers too. The implicit DELETE of a DROP TABLE
-- fires no trigger.
DROP TABLE transitions;

ALTER TABLE transitions_new RENAME TO transitions;

CREATE INDEX transitions_purchase_idx ON transitions (purchase_id, id);

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

-- +goose StatementBegin
CREATE TRIGGER transitions_no_replace
BEFORE INSERT ON transitions
FOR EACH ROW
WHEN EXISTS (SELECT 1 FROM transitions WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'transitions is append-only: REPLACE of row ' || NEW.id || ' refused');
END;
-- +goose StatementEnd

-- allowed_transitions is read-only. SQLite has no TRUNCATE: a DELETE
-- without WHERE fires the DELETE trigger too.

-- +goose StatementBegin
CREATE TRIGGER allowed_transitions_no_insert
BEFORE INSERT ON allowed_transitions
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'allowed_transitions is read-only: INSERT refused (it changes only by migration)');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER allowed_transitions_no_update
BEFORE UPDATE ON allowed_transitions
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'allowed_transitions is read-only: UPDATE refused (it changes only by migration)');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER allowed_transitions_no_delete
BEFORE DELETE ON allowed_transitions
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'allowed_transitions is read-only: DELETE refused (it changes only by migration)');
END;
-- +goose StatementEnd

-- +goose Down

DROP TRIGGER allowed_transitions_no_delete;
DROP TRIGGER allowed_transitions_no_update;
DROP TRIGGER allowed_transitions_no_insert;

-- Rebuild transitions as 00001 made it, without the foreign key to
-- allowed_transitions, by the same procedure.

CREATE TABLE transitions_old (
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

INSERT INTO transitions_old (id, purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at)
SELECT id, purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at FROM transitions;

DROP TABLE transitions;

ALTER TABLE transitions_old RENAME TO transitions;

CREATE INDEX transitions_purchase_idx ON transitions (purchase_id, id);

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

-- +goose StatementBegin
CREATE TRIGGER transitions_no_replace
BEFORE INSERT ON transitions
FOR EACH ROW
WHEN EXISTS (SELECT 1 FROM transitions WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'transitions is append-only: REPLACE of row ' || NEW.id || ' refused');
END;
-- +goose StatementEnd

DROP TABLE audit_runs;
DROP TABLE audit_links;
DROP TABLE audit_findings;
DROP INDEX purchases_first_attempt_idx;
ALTER TABLE webhook_inbox DROP COLUMN event_created;
ALTER TABLE webhook_inbox DROP COLUMN currency;
ALTER TABLE webhook_inbox DROP COLUMN amount;
ALTER TABLE purchases DROP COLUMN doubt;
ALTER TABLE purchases DROP COLUMN settled_at;
