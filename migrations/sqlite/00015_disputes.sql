-- payrecon schema for SQLite, part 15: disputes, a cardholder's challenge
-- of a payment, beside the purchase's and the refunds' processes. It
-- mirrors migrations/postgres/00017 (same conventions as
-- 00001_core.sql: STRICT tables, times as INTEGER Unix microseconds in
-- UTC, NULL for none, booleans as INTEGER 0 or 1).
--
-- What and why (00017 for Postgres says more):
--
--   * dispute_states and dispute_allowed_transitions: the dispute machine
--     (statemachine.Dispute.Transitions(); a test compares the two),
--     read-only as refund_allowed_transitions is.
--
--   * disputes (reconcile.Dispute), guarded as refunds are: a dispute
--     starts in open and moves only along dispute_allowed_transitions;
--     its purchase, payment, provider id, amount and currency are fixed at
--     insert. The provider's id is unique.
--
--   * The refunds' limits (refunds_check_insert of 00008, recreated, as a
--     trigger cannot change): a finding about a dispute is not
--     refundable; a lost dispute's amount counts with the refunds of its
--     payment against the payment's amount; and a dispute that forbids a
--     refund (open or evidence submitted and not refundable, a
--     chargeback; or lost) refuses it, after the amount is judged. The
--     single writer makes the checks and the insert one.
--
--   * transitions gets dispute_id, with a foreign key (dispute_id,
--     purchase_id) to disputes and a check that a row is about a refund
--     or a dispute at most: rebuilt, as SQLite cannot add a table
--     constraint, by the procedure 00008 follows (create, copy keeping the
--     ids, drop, rename, recreate its indexes and triggers; no table
--     refers to it). transitions_guard_insert holds a dispute's row to
--     the dispute's moves.
--
--   * audit_findings.kind admits 'foreign_dispute', 'dispute_mismatch'
--     and 'dispute_exceeds' (rebuilt: a CHECK cannot change; its indexes
--     and triggers as 00008 made them).
--
--   * webhook_inbox gets dispute: the dispute a webhook about one carries
--     (reconcile.InboxEvent.Dispute, provider.Dispute as JSON text), NULL
--     for the other events.
--
--   * ListOpenDisputes reads disputes_open_idx, which holds only the
--     disputes not decided, in its order: by evidence due date, those
--     without one last (SQLite sorts NULL first, so the index leads with
--     evidence_due_by IS NULL), then id.
--
-- The triggers RAISE(ABORT, ...) (SQLITE_CONSTRAINT_TRIGGER) with these
-- messages, which the Go store translates:
--   'forbidden transition ...'        a dispute inserted in another state
--                                     than open, a forbidden move of a
--                                     dispute, or a move outside its
--                                     machine in the audit
--   'not refundable: ...'             as in 00008, or the finding is a
--                                     dispute's
--   'refund exceeds the payment: ...' the refunds and lost disputes of a
--                                     payment would exceed its amount
--   'payment disputed: ...'           a dispute forbids the refund
--   'disputes: ... fixed at insert ...' an UPDATE of a dispute's
--                                     purchase, payment, provider id,
--                                     amount or currency
--   'dispute_allowed_transitions is read-only: ...'
--
-- The Down drops the disputes, and with them their rows of the audit,
-- the dispute findings and the inbox's disputes: the schema before it
-- has no place for them.

-- +goose Up

CREATE TABLE dispute_states (
    state TEXT NOT NULL PRIMARY KEY
) STRICT, WITHOUT ROWID;

INSERT INTO dispute_states (state) VALUES
    ('open'),
    ('evidence_submitted'),
    ('won'),
    ('lost'),
    ('closed');

CREATE TABLE dispute_allowed_transitions (
    from_state TEXT NOT NULL REFERENCES dispute_states (state),
    to_state   TEXT NOT NULL REFERENCES dispute_states (state),
    PRIMARY KEY (from_state, to_state)
) STRICT, WITHOUT ROWID;

-- Exactly statemachine.Dispute.Transitions(); a test compares the two.
INSERT INTO dispute_allowed_transitions (from_state, to_state) VALUES
    ('open', 'evidence_submitted'),
    ('open', 'won'),
    ('open', 'lost'),
    ('open', 'closed'),
    ('evidence_submitted', 'open'),
    ('evidence_submitted', 'won'),
    ('evidence_submitted', 'lost'),
    ('evidence_submitted', 'closed');

-- dispute_allowed_transitions is read-only, as refund_allowed_transitions
-- (00008).

-- +goose StatementBegin
CREATE TRIGGER dispute_allowed_transitions_no_insert
BEFORE INSERT ON dispute_allowed_transitions
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'dispute_allowed_transitions is read-only: INSERT refused (it changes only by migration)');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER dispute_allowed_transitions_no_update
BEFORE UPDATE ON dispute_allowed_transitions
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'dispute_allowed_transitions is read-only: UPDATE refused (it changes only by migration)');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER dispute_allowed_transitions_no_delete
BEFORE DELETE ON dispute_allowed_transitions
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'dispute_allowed_transitions is read-only: DELETE refused (it changes only by migration)');
END;
-- +goose StatementEnd

-- audit_findings, rebuilt for the dispute findings' kinds, keeping its
-- ids. No table refers to it: dropping it fires no foreign key action,
-- and no trigger. The trigger that reads it, refunds_check_insert, goes
-- first (SQLite checks every trigger's tables when a table is renamed)
-- and comes back below with the disputes.

DROP TRIGGER refunds_check_insert;

CREATE TABLE audit_findings_new (
    id          INTEGER NOT NULL PRIMARY KEY, -- the rowid: numbered in insertion order
    provider    TEXT    NOT NULL CHECK (provider <> ''),
    payment_id  TEXT    NOT NULL CHECK (payment_id <> ''),
    kind        TEXT    NOT NULL CHECK (kind IN (
                    'orphan_charge', 'duplicate_charge', 'amount_mismatch',
                    'currency_mismatch', 'state_disagreement', 'missing_at_provider',
                    'orphan_refund', 'refund_mismatch',
                    'foreign_dispute', 'dispute_mismatch', 'dispute_exceeds')),
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

INSERT INTO audit_findings_new (id, provider, payment_id, kind, purchase_id, amount, currency, status, evidence, found_at, closed_at, closed_by, close_note)
SELECT id, provider, payment_id, kind, purchase_id, amount, currency, status, evidence, found_at, closed_at, closed_by, close_note FROM audit_findings;

DROP TABLE audit_findings;

ALTER TABLE audit_findings_new RENAME TO audit_findings;

CREATE INDEX audit_findings_open_idx ON audit_findings (found_at, id)
    WHERE closed_at IS NULL;
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

CREATE TABLE disputes (
    id                  TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
    provider_dispute_id TEXT    NOT NULL UNIQUE CHECK (provider_dispute_id <> ''),
    purchase_id         TEXT    NOT NULL REFERENCES purchases (id),
    -- The disputed payment: the purchase's own.
    payment_id          TEXT    NOT NULL CHECK (payment_id <> ''),
    amount              INTEGER NOT NULL CHECK (amount > 0),
    currency            TEXT    NOT NULL CHECK (currency <> ''),
    reason              TEXT    NOT NULL DEFAULT '',
    state               TEXT    NOT NULL REFERENCES dispute_states (state),
    version             INTEGER NOT NULL,
    provider_status     TEXT    NOT NULL DEFAULT '',
    inquiry             INTEGER NOT NULL DEFAULT 0 CHECK (inquiry IN (0, 1)),
    evidence_due_by     INTEGER NULL,
    charge_refundable   INTEGER NOT NULL DEFAULT 0 CHECK (charge_refundable IN (0, 1)),
    withdrawn           INTEGER NOT NULL DEFAULT 0 CHECK (withdrawn >= 0),
    reinstated          INTEGER NOT NULL DEFAULT 0 CHECK (reinstated >= 0),
    provider_updated_at INTEGER NULL,
    created_at          INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    closed_at           INTEGER NULL,
    -- The target of the audit's foreign key, which holds a dispute's rows
    -- to its purchase.
    UNIQUE (id, purchase_id)
) STRICT;

-- A purchase's disputes, oldest first.
CREATE INDEX disputes_purchase_idx ON disputes (purchase_id, created_at, id);
-- The refunds' limits: the disputes of one payment.
CREATE INDEX disputes_payment_idx ON disputes (payment_id);
-- ListOpenDisputes: the disputes not decided, soonest evidence due first,
-- those without a due date last.
CREATE INDEX disputes_open_idx ON disputes (evidence_due_by IS NULL, evidence_due_by, id)
    WHERE state IN ('open', 'evidence_submitted');

-- +goose StatementBegin
CREATE TRIGGER disputes_guard_insert
BEFORE INSERT ON disputes
FOR EACH ROW
WHEN NEW.state IS NOT 'open'
BEGIN
    SELECT RAISE(ABORT, 'forbidden transition: dispute ' || coalesce(NEW.id, 'NULL') ||
        ' inserted in state ' || coalesce(NEW.state, 'NULL') || ', a dispute starts in open');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER disputes_guard_transition
BEFORE UPDATE OF state ON disputes
FOR EACH ROW
WHEN NEW.state IS NOT OLD.state AND NOT EXISTS (
    SELECT 1 FROM dispute_allowed_transitions
    WHERE from_state = OLD.state AND to_state = NEW.state
)
BEGIN
    SELECT RAISE(ABORT, 'forbidden transition ' || OLD.state || ' -> ' || coalesce(NEW.state, 'NULL') ||
        ' (dispute ' || OLD.id || ')');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER disputes_fixed
BEFORE UPDATE OF purchase_id, payment_id, provider_dispute_id, amount, currency ON disputes
FOR EACH ROW
WHEN NEW.purchase_id IS NOT OLD.purchase_id
    OR NEW.payment_id IS NOT OLD.payment_id
    OR NEW.provider_dispute_id IS NOT OLD.provider_dispute_id
    OR NEW.amount IS NOT OLD.amount
    OR NEW.currency IS NOT OLD.currency
BEGIN
    SELECT RAISE(ABORT, 'disputes: the purchase, payment, provider id, amount and currency of dispute ' || OLD.id ||
        ' are fixed at insert: UPDATE refused');
END;
-- +goose StatementEnd

-- refunds_check_insert, as 00008 wrote it, with the disputes: a dispute
-- finding is not refundable, a lost dispute's amount counts with the
-- refunds, and a dispute that forbids a refund refuses it. Every check in
-- one trigger, in this order, as before. (Dropped above.)

-- +goose StatementBegin
CREATE TRIGGER refunds_check_insert
BEFORE INSERT ON refunds
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'forbidden transition: refund ' || coalesce(NEW.id, 'NULL') ||
        ' inserted in state ' || coalesce(NEW.state, 'NULL') || ', a refund starts in created')
    WHERE NEW.state IS NOT 'created';

    SELECT RAISE(ABORT, 'not refundable: purchase ' || p.id || ' is ' || p.state ||
        ', not succeeded (refund ' || coalesce(NEW.id, 'NULL') || ')')
    FROM purchases p
    WHERE NEW.finding_id IS NULL AND p.id = NEW.purchase_id AND p.state IS NOT 'succeeded';
    SELECT RAISE(ABORT, 'not refundable: payment ' || coalesce(NEW.payment_id, 'NULL') ||
        ' is not the payment of purchase ' || p.id || ' (' || coalesce(p.provider_payment_id, 'none') ||
        ') (refund ' || coalesce(NEW.id, 'NULL') || ')')
    FROM purchases p
    WHERE NEW.finding_id IS NULL AND coalesce(NEW.payment_id, '') <> '' AND p.id = NEW.purchase_id
        AND p.provider_payment_id IS NOT NEW.payment_id;

    SELECT RAISE(ABORT, 'not refundable: no finding ' || NEW.finding_id || ' (refund ' || coalesce(NEW.id, 'NULL') || ')')
    WHERE NEW.finding_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM audit_findings WHERE id = NEW.finding_id);
    SELECT RAISE(ABORT, 'not refundable: finding ' || f.id || ' is about payment ' || f.payment_id ||
        ' of purchase ' || coalesce(f.purchase_id, 'none') || ', not payment ' || coalesce(NEW.payment_id, 'NULL') ||
        ' of purchase ' || coalesce(NEW.purchase_id, 'NULL') || ' (refund ' || coalesce(NEW.id, 'NULL') || ')')
    FROM audit_findings f
    WHERE f.id = NEW.finding_id AND (f.payment_id IS NOT NEW.payment_id OR f.purchase_id IS NOT NEW.purchase_id);
    SELECT RAISE(ABORT, 'not refundable: finding ' || f.id || ' is an ' || f.kind ||
        ' finding, about a refund, not a charge (refund ' || coalesce(NEW.id, 'NULL') || ')')
    FROM audit_findings f
    WHERE f.id = NEW.finding_id AND f.kind IN ('orphan_refund', 'refund_mismatch');
    SELECT RAISE(ABORT, 'not refundable: finding ' || f.id || ' is a ' || f.kind ||
        ' finding, about a dispute, not a charge (refund ' || coalesce(NEW.id, 'NULL') || ')')
    FROM audit_findings f
    WHERE f.id = NEW.finding_id AND f.kind IN ('foreign_dispute', 'dispute_mismatch', 'dispute_exceeds');

    SELECT RAISE(ABORT, 'refund exceeds the payment: refund ' || coalesce(NEW.id, 'NULL') || ' of ' || NEW.amount ||
        ' would take the refunds of payment ' || NEW.payment_id || ' to ' || (l.taken + l.lost + NEW.amount) ||
        ' of its ' || l.cap || ' (' || l.lost || ' of it lost to disputes)')
    FROM (
        SELECT
            (SELECT coalesce(sum(amount), 0) FROM refunds WHERE payment_id = NEW.payment_id AND state <> 'failed') AS taken,
            (SELECT coalesce(sum(amount), 0) FROM disputes WHERE payment_id = NEW.payment_id AND state = 'lost') AS lost,
            CASE WHEN NEW.finding_id IS NULL
                THEN (SELECT amount FROM purchases WHERE id = NEW.purchase_id)
                ELSE (SELECT amount FROM audit_findings WHERE id = NEW.finding_id)
            END AS cap
    ) AS l
    WHERE NEW.amount > 0 AND l.taken + l.lost + NEW.amount > l.cap;

    -- A refund of a missing purchase is left to the foreign key, which
    -- names it.
    SELECT RAISE(ABORT, 'payment disputed: payment ' || NEW.payment_id || ' has dispute ' || d.id ||
        ' in state ' || d.state || ', which forbids a refund (refund ' || coalesce(NEW.id, 'NULL') || ')')
    FROM (
        SELECT id, state FROM disputes
        WHERE payment_id = NEW.payment_id
            AND ((state IN ('open', 'evidence_submitted') AND NOT charge_refundable) OR state = 'lost')
        ORDER BY id
        LIMIT 1
    ) AS d
    WHERE NEW.amount > 0 AND EXISTS (SELECT 1 FROM purchases WHERE id = NEW.purchase_id);
END;
-- +goose StatementEnd

-- transitions, rebuilt: dispute_id, its foreign key, one subject at most,
-- and a dispute's row held to the dispute's moves.

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
    refund_id   TEXT    NULL,
    dispute_id  TEXT    NULL,
    FOREIGN KEY (refund_id, purchase_id) REFERENCES refunds (id, purchase_id),
    FOREIGN KEY (dispute_id, purchase_id) REFERENCES disputes (id, purchase_id),
    CONSTRAINT transitions_subject_check CHECK (refund_id IS NULL OR dispute_id IS NULL)
) STRICT;

INSERT INTO transitions_new (id, purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at, refund_id)
SELECT id, purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at, refund_id FROM transitions;

DROP TABLE transitions;

ALTER TABLE transitions_new RENAME TO transitions;

CREATE INDEX transitions_purchase_idx ON transitions (purchase_id, id);
CREATE INDEX transitions_refund_idx ON transitions (refund_id, id) WHERE refund_id IS NOT NULL;
CREATE INDEX transitions_dispute_idx ON transitions (dispute_id, id) WHERE dispute_id IS NOT NULL;

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

-- An insert over a stored row is refused first, then a move outside its
-- machine's table: a dispute's, a refund's or a purchase's.
-- +goose StatementBegin
CREATE TRIGGER transitions_guard_insert
BEFORE INSERT ON transitions
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'transitions is append-only: REPLACE of row ' || NEW.id || ' refused')
    WHERE EXISTS (SELECT 1 FROM transitions WHERE id = NEW.id);
    SELECT RAISE(ABORT, 'forbidden transition ' || coalesce(NEW.from_state, 'NULL') || ' -> ' || coalesce(NEW.to_state, 'NULL') ||
        ' in the audit of ' || CASE
            WHEN NEW.dispute_id IS NOT NULL THEN 'dispute ' || NEW.dispute_id
            WHEN NEW.refund_id IS NOT NULL THEN 'refund ' || NEW.refund_id
            ELSE 'purchase ' || coalesce(NEW.purchase_id, 'NULL') END)
    WHERE CASE
        WHEN NEW.dispute_id IS NOT NULL
            THEN NOT EXISTS (SELECT 1 FROM dispute_allowed_transitions WHERE from_state = NEW.from_state AND to_state = NEW.to_state)
        WHEN NEW.refund_id IS NOT NULL
            THEN NOT EXISTS (SELECT 1 FROM refund_allowed_transitions WHERE from_state = NEW.from_state AND to_state = NEW.to_state)
        ELSE NOT EXISTS (SELECT 1 FROM allowed_transitions WHERE from_state = NEW.from_state AND to_state = NEW.to_state)
    END;
END;
-- +goose StatementEnd

ALTER TABLE webhook_inbox ADD COLUMN dispute TEXT NULL CHECK (dispute IS NULL OR json_valid(dispute));

-- +goose Down

ALTER TABLE webhook_inbox DROP COLUMN dispute;

DROP TRIGGER refunds_check_insert;

-- transitions as 00008 made it, without the disputes' rows.

CREATE TABLE transitions_old (
    id          INTEGER NOT NULL PRIMARY KEY, -- the rowid: numbered in insertion order
    purchase_id TEXT    NOT NULL REFERENCES purchases (id),
    from_state  TEXT    NOT NULL,
    to_state    TEXT    NOT NULL,
    cause       TEXT    NOT NULL,
    evidence    TEXT    NOT NULL DEFAULT '',
    actor       TEXT    NOT NULL DEFAULT '',
    lease_token INTEGER NOT NULL DEFAULT 0,
    at          INTEGER NOT NULL,
    refund_id   TEXT    NULL,
    FOREIGN KEY (refund_id, purchase_id) REFERENCES refunds (id, purchase_id)
) STRICT;

INSERT INTO transitions_old (id, purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at, refund_id)
SELECT id, purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at, refund_id FROM transitions
WHERE dispute_id IS NULL;

DROP TABLE transitions;

ALTER TABLE transitions_old RENAME TO transitions;

CREATE INDEX transitions_purchase_idx ON transitions (purchase_id, id);
CREATE INDEX transitions_refund_idx ON transitions (refund_id, id) WHERE refund_id IS NOT NULL;

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

-- An insert over a stored row is refused (as transitions_no_replace of
-- 00001 did), then a move outside its machine's table. One trigger, so
-- that the first rule is checked first.
-- +goose StatementBegin
CREATE TRIGGER transitions_guard_insert
BEFORE INSERT ON transitions
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'transitions is append-only: REPLACE of row ' || NEW.id || ' refused')
    WHERE EXISTS (SELECT 1 FROM transitions WHERE id = NEW.id);
    SELECT RAISE(ABORT, 'forbidden transition ' || coalesce(NEW.from_state, 'NULL') || ' -> ' || coalesce(NEW.to_state, 'NULL') ||
        ' in the audit of ' || CASE WHEN NEW.refund_id IS NULL
            THEN 'purchase ' || coalesce(NEW.purchase_id, 'NULL')
            ELSE 'refund ' || NEW.refund_id END)
    WHERE CASE WHEN NEW.refund_id IS NULL
        THEN NOT EXISTS (SELECT 1 FROM allowed_transitions WHERE from_state = NEW.from_state AND to_state = NEW.to_state)
        ELSE NOT EXISTS (SELECT 1 FROM refund_allowed_transitions WHERE from_state = NEW.from_state AND to_state = NEW.to_state)
    END;
END;
-- +goose StatementEnd

DROP TABLE disputes;

CREATE TABLE audit_findings_new (
    id          INTEGER NOT NULL PRIMARY KEY, -- the rowid: numbered in insertion order
    provider    TEXT    NOT NULL CHECK (provider <> ''),
    payment_id  TEXT    NOT NULL CHECK (payment_id <> ''),
    kind        TEXT    NOT NULL CHECK (kind IN (
                    'orphan_charge', 'duplicate_charge', 'amount_mismatch',
                    'currency_mismatch', 'state_disagreement', 'missing_at_provider',
                    'orphan_refund', 'refund_mismatch')),
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

INSERT INTO audit_findings_new (id, provider, payment_id, kind, purchase_id, amount, currency, status, evidence, found_at, closed_at, closed_by, close_note)
SELECT id, provider, payment_id, kind, purchase_id, amount, currency, status, evidence, found_at, closed_at, closed_by, close_note FROM audit_findings
WHERE kind NOT IN ('foreign_dispute', 'dispute_mismatch', 'dispute_exceeds');

DROP TABLE audit_findings;

ALTER TABLE audit_findings_new RENAME TO audit_findings;

CREATE INDEX audit_findings_open_idx ON audit_findings (found_at, id)
    WHERE closed_at IS NULL;
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

-- refunds_check_insert as 00008 wrote it, once audit_findings is back.

-- +goose StatementBegin
CREATE TRIGGER refunds_check_insert
BEFORE INSERT ON refunds
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'forbidden transition: refund ' || coalesce(NEW.id, 'NULL') ||
        ' inserted in state ' || coalesce(NEW.state, 'NULL') || ', a refund starts in created')
    WHERE NEW.state IS NOT 'created';

    SELECT RAISE(ABORT, 'not refundable: purchase ' || p.id || ' is ' || p.state ||
        ', not succeeded (refund ' || coalesce(NEW.id, 'NULL') || ')')
    FROM purchases p
    WHERE NEW.finding_id IS NULL AND p.id = NEW.purchase_id AND p.state IS NOT 'succeeded';
    SELECT RAISE(ABORT, 'not refundable: payment ' || coalesce(NEW.payment_id, 'NULL') ||
        ' is not the payment of purchase ' || p.id || ' (' || coalesce(p.provider_payment_id, 'none') ||
        ') (refund ' || coalesce(NEW.id, 'NULL') || ')')
    FROM purchases p
    WHERE NEW.finding_id IS NULL AND coalesce(NEW.payment_id, '') <> '' AND p.id = NEW.purchase_id
        AND p.provider_payment_id IS NOT NEW.payment_id;

    SELECT RAISE(ABORT, 'not refundable: no finding ' || NEW.finding_id || ' (refund ' || coalesce(NEW.id, 'NULL') || ')')
    WHERE NEW.finding_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM audit_findings WHERE id = NEW.finding_id);
    SELECT RAISE(ABORT, 'not refundable: finding ' || f.id || ' is about payment ' || f.payment_id ||
        ' of purchase ' || coalesce(f.purchase_id, 'none') || ', not payment ' || coalesce(NEW.payment_id, 'NULL') ||
        ' of purchase ' || coalesce(NEW.purchase_id, 'NULL') || ' (refund ' || coalesce(NEW.id, 'NULL') || ')')
    FROM audit_findings f
    WHERE f.id = NEW.finding_id AND (f.payment_id IS NOT NEW.payment_id OR f.purchase_id IS NOT NEW.purchase_id);
    SELECT RAISE(ABORT, 'not refundable: finding ' || f.id || ' is an ' || f.kind ||
        ' finding, about a refund, not a charge (refund ' || coalesce(NEW.id, 'NULL') || ')')
    FROM audit_findings f
    WHERE f.id = NEW.finding_id AND f.kind IN ('orphan_refund', 'refund_mismatch');

    SELECT RAISE(ABORT, 'refund exceeds the payment: refund ' || coalesce(NEW.id, 'NULL') || ' of ' || NEW.amount ||
        ' would take the refunds of payment ' || NEW.payment_id || ' to ' || (l.taken + NEW.amount) || ' of its ' || l.cap)
    FROM (
        SELECT
            (SELECT coalesce(sum(amount), 0) FROM refunds WHERE payment_id = NEW.payment_id AND state <> 'failed') AS taken,
            CASE WHEN NEW.finding_id IS NULL
                THEN (SELECT amount FROM purchases WHERE id = NEW.purchase_id)
                ELSE (SELECT amount FROM audit_findings WHERE id = NEW.finding_id)
            END AS cap
    ) AS l
    WHERE NEW.amount > 0 AND l.taken + NEW.amount > l.cap;
END;
-- +goose StatementEnd

DROP TRIGGER dispute_allowed_transitions_no_delete;
DROP TRIGGER dispute_allowed_transitions_no_update;
DROP TRIGGER dispute_allowed_transitions_no_insert;
DROP TABLE dispute_allowed_transitions;
DROP TABLE dispute_states;
