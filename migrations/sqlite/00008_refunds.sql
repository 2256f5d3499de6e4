-- payrecon schema for SQLite, part 8: refunds, their own process beside
-- the purchase's. It mirrors migrations/postgres/00009 (same conventions
-- as 00001_core.sql: STRICT tables, times as INTEGER Unix microseconds in
-- UTC, NULL for none).
--
-- What and why (00009 for Postgres says more):
--
--   * refund_states and refund_allowed_transitions: the refund machine
--     (statemachine.Refund.Transitions(); a test compares the two),
--     read-only as allowed_transitions is.
--
--   * refunds (reconcile.Refund), guarded as purchases are: a refund
--     starts in created and moves only along refund_allowed_transitions;
--     its amount, payment, purchase and finding are fixed at insert.
--
--   * The limits, checked on every insert of a refund: without a finding,
--     its purchase must be succeeded and its payment the purchase's;
--     with a finding, the finding must be about that payment and that
--     purchase, and about a charge; and the refunds of one payment in any
--     state but failed (pending ones count) add up to at most the
--     payment's amount (the purchase's for its own payment, the finding's
--     for a finding's). SQLite has one writer: the check and the insert
--     run under the write lock, so two inserts that together exceed the
--     amount cannot both commit.
--
--   * transitions, provider_attempts and operator_actions get refund_id,
--     with a foreign key (refund_id, purchase_id) to refunds. SQLite
--     cannot add a table constraint, so each is rebuilt by the procedure
--     00004 follows (create, copy keeping the ids, drop, rename, recreate
--     its indexes and append-only triggers; no table refers to them, so
--     dropping them fires no foreign key action). transitions loses its
--     foreign key to allowed_transitions: a trigger checks each row's
--     move against its machine's table instead (a refund's moves are not
--     a purchase's), in one trigger with the refusal of an INSERT OR
--     REPLACE over a stored row (transitions_guard_insert, in place of
--     transitions_no_replace), so that the refusals come in that order.
--     operator_actions may record a 'refund' action.
--
--   * jobs get a kind, 'purchase' or 'refund', and refund_id; id, the
--     job's key, is derived: the refund id of a refund's job, the
--     purchase id of a purchase's. Rebuilt, as SQLite cannot change a
--     primary key; jobs_due_idx is on (run_at, id), the claim's order.
--
--   * audit_findings.kind admits 'orphan_refund' and 'refund_mismatch'
--     (rebuilt: a CHECK cannot change; its indexes and triggers as 00004
--     made them).
--
-- The triggers RAISE(ABORT, ...) (SQLITE_CONSTRAINT_TRIGGER) with these
-- messages, which the Go store translates:
--   'forbidden transition ...'        a refund inserted in another state
--                                     than created, a forbidden move of a
--                                     refund, or a move outside its
--                                     machine in the audit
--   'not refundable: ...'             the purchase is not succeeded, the
--                                     payment is not the purchase's, or
--                                     the finding does not name it
--   'refund exceeds the payment: ...' the refunds of a payment would
--                                     exceed its amount
--   'refunds: ... fixed at insert ...' an UPDATE of a refund's amount,
--                                     payment, purchase or finding
--   'refund_allowed_transitions is read-only: ...'
--
-- The Down drops the refunds, and with them the refunds' rows of the
-- audit, their jobs and the refund findings: the schema before it has no
-- place for them.

-- +goose Up

CREATE TABLE refund_states (
    state TEXT NOT NULL PRIMARY KEY
) STRICT, WITHOUT ROWID;

INSERT INTO refund_states (state) VALUES
    ('created'),
    ('submitted'),
    ('uncertain'),
    ('reconciling'),
    ('succeeded'),
    ('failed');

CREATE TABLE refund_allowed_transitions (
    from_state TEXT NOT NULL REFERENCES refund_states (state),
    to_state   TEXT NOT NULL REFERENCES refund_states (state),
    PRIMARY KEY (from_state, to_state)
) STRICT, WITHOUT ROWID;

-- Exactly statemachine.Refund.Transitions(); a test compares the two.
INSERT INTO refund_allowed_transitions (from_state, to_state) VALUES
    ('created', 'submitted'),
    ('submitted', 'uncertain'),
    ('submitted', 'succeeded'),
    ('submitted', 'failed'),
    ('uncertain', 'reconciling'),
    ('reconciling', 'uncertain'),
    ('reconciling', 'succeeded'),
    ('reconciling', 'failed');

-- refund_allowed_transitions is read-only, as allowed_transitions (00004).

-- +goose StatementBegin
CREATE TRIGGER refund_allowed_transitions_no_insert
BEFORE INSERT ON refund_allowed_transitions
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'refund_allowed_transitions is read-only: INSERT refused (it changes only by migration)');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER refund_allowed_transitions_no_update
BEFORE UPDATE ON refund_allowed_transitions
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'refund_allowed_transitions is read-only: UPDATE refused (it changes only by migration)');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER refund_allowed_transitions_no_delete
BEFORE DELETE ON refund_allowed_transitions
FOR EACH ROW
BEGIN
    SELECT RAISE(ABORT, 'refund_allowed_transitions is read-only: DELETE refused (it changes only by migration)');
END;
-- +goose StatementEnd

-- audit_findings, rebuilt for the refund findings' kinds, keeping its
-- ids. No table refers to it (refunds.finding_id is not a foreign key):
-- dropping it fires no foreign key action, and no trigger.

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

CREATE TABLE refunds (
    id                 TEXT    NOT NULL PRIMARY KEY CHECK (id <> ''),
    purchase_id        TEXT    NOT NULL REFERENCES purchases (id),
    -- The provider's payment refunded: the purchase's own, or the one an
    -- audit finding names.
    payment_id         TEXT    NOT NULL CHECK (payment_id <> ''),
    -- The audit finding whose payment is refunded, for a duplicate
    -- charge's refund. Not a foreign key, as on Postgres: the insert's
    -- trigger checks it, and findings are never deleted (00004).
    finding_id         INTEGER NULL,
    amount             INTEGER NOT NULL CHECK (amount > 0),
    currency           TEXT    NOT NULL,
    reason             TEXT    NOT NULL DEFAULT '',
    -- The purchase API client that asked for it; NULL for none, as for
    -- purchases (00005).
    client             TEXT    NULL CHECK (client <> ''),
    requested_by       TEXT    NOT NULL DEFAULT '',
    state              TEXT    NOT NULL REFERENCES refund_states (state),
    version            INTEGER NOT NULL,
    provider_key       TEXT    NOT NULL UNIQUE CHECK (provider_key <> ''),
    provider_request   TEXT    NOT NULL CHECK (json_valid(provider_request)),
    params_hash        TEXT    NOT NULL CHECK (params_hash <> ''),
    provider_refund_id TEXT    NULL UNIQUE,
    failure_reason     TEXT    NOT NULL DEFAULT '',
    first_attempt_at   INTEGER NULL,
    uncertain_since    INTEGER NULL,
    escalated_at       INTEGER NULL,
    escalation_reason  TEXT    NULL,
    settled_at         INTEGER NULL,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    -- The target of the audit's and the jobs' foreign keys, which hold a
    -- refund's rows to its purchase.
    UNIQUE (id, purchase_id)
) STRICT;

-- A purchase's refunds, oldest first.
CREATE INDEX refunds_purchase_idx ON refunds (purchase_id, created_at, id);
-- The limit's sum: the refunds of one payment.
CREATE INDEX refunds_payment_idx ON refunds (payment_id);
-- One refund of a finding's charge at a time: the operator's "refund this
-- charge" submitted twice (a double click, a retried form) must not refund
-- it twice under two keys. A failed one leaves the index, so the charge
-- can be refunded again.
CREATE UNIQUE INDEX refunds_finding_once ON refunds (finding_id)
    WHERE finding_id IS NOT NULL AND state <> 'failed';
-- CountRefundsByState.
CREATE INDEX refunds_state_idx ON refunds (state);
-- The operator list and its count.
CREATE INDEX refunds_escalated_at_idx ON refunds (escalated_at, id)
    WHERE escalated_at IS NOT NULL;
-- The oldest refund whose outcome is open, for the metrics.
CREATE INDEX refunds_uncertain_since_idx ON refunds (uncertain_since)
    WHERE state IN ('uncertain', 'reconciling');
-- The escalation sweep: uncertain, not escalated, oldest first.
CREATE INDEX refunds_overdue_idx ON refunds (uncertain_since, id)
    WHERE state = 'uncertain' AND escalated_at IS NULL;

-- Every check of an insert, in one trigger so that they run in this
-- order (SQLite does not promise one between triggers): the state, then
-- what the purchase or the finding allows, then the payment's amount. A
-- missing purchase, a NULL or an amount that is not positive are left to
-- the constraints, which name them.
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

-- +goose StatementBegin
CREATE TRIGGER refunds_guard_transition
BEFORE UPDATE OF state ON refunds
FOR EACH ROW
WHEN NEW.state IS NOT OLD.state AND NOT EXISTS (
    SELECT 1 FROM refund_allowed_transitions
    WHERE from_state = OLD.state AND to_state = NEW.state
)
BEGIN
    SELECT RAISE(ABORT, 'forbidden transition ' || OLD.state || ' -> ' || coalesce(NEW.state, 'NULL') ||
        ' (refund ' || OLD.id || ')');
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER refunds_fixed
BEFORE UPDATE OF amount, payment_id, purchase_id, finding_id ON refunds
FOR EACH ROW
WHEN NEW.amount IS NOT OLD.amount
    OR NEW.payment_id IS NOT OLD.payment_id
    OR NEW.purchase_id IS NOT OLD.purchase_id
    OR NEW.finding_id IS NOT OLD.finding_id
BEGIN
    SELECT RAISE(ABORT, 'refunds: the amount, payment, purchase and finding of refund ' || OLD.id ||
        ' are fixed at insert: UPDATE refused');
END;
-- +goose StatementEnd

-- transitions, rebuilt: refund_id, and the move checked by a trigger
-- against the table of its machine instead of the foreign key to
-- allowed_transitions (a refund's moves are not a purchase's).

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
    FOREIGN KEY (refund_id, purchase_id) REFERENCES refunds (id, purchase_id)
) STRICT;

INSERT INTO transitions_new (id, purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at)
SELECT id, purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at FROM transitions;

DROP TABLE transitions;

ALTER TABLE transitions_new RENAME TO transitions;

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

-- provider_attempts and operator_actions, rebuilt with refund_id (and
-- the 'refund' action), their indexes and append-only triggers as
-- before.

CREATE TABLE provider_attempts_new (
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
    at          INTEGER NOT NULL,
    refund_id   TEXT    NULL,
    FOREIGN KEY (refund_id, purchase_id) REFERENCES refunds (id, purchase_id)
) STRICT;

INSERT INTO provider_attempts_new (id, purchase_id, op, idem_key, outcome, payment_id, status, latency_ns, error, actor, lease_token, applied, note, at)
SELECT id, purchase_id, op, idem_key, outcome, payment_id, status, latency_ns, error, actor, lease_token, applied, note, at FROM provider_attempts;

DROP TABLE provider_attempts;

ALTER TABLE provider_attempts_new RENAME TO provider_attempts;

CREATE INDEX provider_attempts_purchase_idx ON provider_attempts (purchase_id, id);
CREATE INDEX provider_attempts_refund_idx ON provider_attempts (refund_id, id) WHERE refund_id IS NOT NULL;

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

-- +goose StatementBegin
CREATE TRIGGER provider_attempts_no_replace
BEFORE INSERT ON provider_attempts
FOR EACH ROW
WHEN EXISTS (SELECT 1 FROM provider_attempts WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'provider_attempts is append-only: REPLACE of row ' || NEW.id || ' refused');
END;
-- +goose StatementEnd

CREATE TABLE operator_actions_new (
    id          INTEGER NOT NULL PRIMARY KEY, -- the rowid: numbered in insertion order
    purchase_id TEXT    NOT NULL REFERENCES purchases (id),
    operator    TEXT    NOT NULL,
    action      TEXT    NOT NULL CHECK (action IN ('recheck', 'resolve', 'note', 'refund')),
    saw         TEXT    NOT NULL DEFAULT '',
    did         TEXT    NOT NULL DEFAULT '',
    evidence    TEXT    NOT NULL DEFAULT '',
    at          INTEGER NOT NULL,
    refund_id   TEXT    NULL,
    FOREIGN KEY (refund_id, purchase_id) REFERENCES refunds (id, purchase_id)
) STRICT;

INSERT INTO operator_actions_new (id, purchase_id, operator, action, saw, did, evidence, at)
SELECT id, purchase_id, operator, action, saw, did, evidence, at FROM operator_actions;

DROP TABLE operator_actions;

ALTER TABLE operator_actions_new RENAME TO operator_actions;

CREATE INDEX operator_actions_purchase_idx ON operator_actions (purchase_id, id);
CREATE INDEX operator_actions_refund_idx ON operator_actions (refund_id, id) WHERE refund_id IS NOT NULL;

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

-- +goose StatementBegin
CREATE TRIGGER operator_actions_no_replace
BEFORE INSERT ON operator_actions
FOR EACH ROW
WHEN EXISTS (SELECT 1 FROM operator_actions WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'operator_actions is append-only: REPLACE of row ' || NEW.id || ' refused');
END;
-- +goose StatementEnd


-- jobs, rebuilt with a kind. id is derived (a stored generated column):
-- the refund id of a refund's job, the purchase id of a purchase's. SQLite
-- refuses a generated column in a primary key, so a unique index holds
-- it.

CREATE TABLE jobs_new (
    id               TEXT    NOT NULL GENERATED ALWAYS AS (coalesce(refund_id, purchase_id)) STORED,
    kind             TEXT    NOT NULL DEFAULT 'purchase' CHECK (kind IN ('purchase', 'refund')),
    purchase_id      TEXT    NOT NULL REFERENCES purchases (id),
    refund_id        TEXT    NULL,
    run_at           INTEGER NOT NULL,
    lease_owner      TEXT    NULL,
    lease_token      INTEGER NOT NULL DEFAULT 0,
    lease_expires_at INTEGER NULL,
    checks           INTEGER NOT NULL DEFAULT 0,
    done_at          INTEGER NULL,
    CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL)),
    CHECK ((kind = 'refund') = (refund_id IS NOT NULL)),
    FOREIGN KEY (refund_id, purchase_id) REFERENCES refunds (id, purchase_id)
) STRICT;

INSERT INTO jobs_new (purchase_id, run_at, lease_owner, lease_token, lease_expires_at, checks, done_at)
SELECT purchase_id, run_at, lease_owner, lease_token, lease_expires_at, checks, done_at FROM jobs;

DROP TABLE jobs;

ALTER TABLE jobs_new RENAME TO jobs;

CREATE UNIQUE INDEX jobs_id_key ON jobs (id);
CREATE INDEX jobs_due_idx ON jobs (run_at, id)
    WHERE done_at IS NULL AND lease_owner IS NULL;
CREATE INDEX jobs_leased_idx ON jobs (lease_expires_at)
    WHERE lease_owner IS NOT NULL AND done_at IS NULL;

-- +goose Down

-- Every table is rebuilt as it was, without the refunds' rows: the
-- schema before this migration has no place for them.

CREATE TABLE jobs_old (
    purchase_id      TEXT    NOT NULL PRIMARY KEY REFERENCES purchases (id),
    run_at           INTEGER NOT NULL,
    lease_owner      TEXT    NULL,
    lease_token      INTEGER NOT NULL DEFAULT 0,
    lease_expires_at INTEGER NULL,
    checks           INTEGER NOT NULL DEFAULT 0,
    done_at          INTEGER NULL,
    CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
) STRICT;

INSERT INTO jobs_old (purchase_id, run_at, lease_owner, lease_token, lease_expires_at, checks, done_at)
SELECT purchase_id, run_at, lease_owner, lease_token, lease_expires_at, checks, done_at FROM jobs WHERE kind = 'purchase';

DROP TABLE jobs;

ALTER TABLE jobs_old RENAME TO jobs;

CREATE INDEX jobs_due_idx ON jobs (run_at, purchase_id)
    WHERE done_at IS NULL AND lease_owner IS NULL;
CREATE INDEX jobs_leased_idx ON jobs (lease_expires_at)
    WHERE lease_owner IS NOT NULL AND done_at IS NULL;

CREATE TABLE operator_actions_old (
    id          INTEGER NOT NULL PRIMARY KEY, -- the rowid: numbered in insertion order
    purchase_id TEXT    NOT NULL REFERENCES purchases (id),
    operator    TEXT    NOT NULL,
    action      TEXT    NOT NULL CHECK (action IN ('recheck', 'resolve', 'note')),
    saw         TEXT    NOT NULL DEFAULT '',
    did         TEXT    NOT NULL DEFAULT '',
    evidence    TEXT    NOT NULL DEFAULT '',
    at          INTEGER NOT NULL
) STRICT;

INSERT INTO operator_actions_old (id, purchase_id, operator, action, saw, did, evidence, at)
SELECT id, purchase_id, operator, action, saw, did, evidence, at FROM operator_actions
WHERE refund_id IS NULL AND action <> 'refund';

DROP TABLE operator_actions;

ALTER TABLE operator_actions_old RENAME TO operator_actions;

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

-- +goose StatementBegin
CREATE TRIGGER operator_actions_no_replace
BEFORE INSERT ON operator_actions
FOR EACH ROW
WHEN EXISTS (SELECT 1 FROM operator_actions WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'operator_actions is append-only: REPLACE of row ' || NEW.id || ' refused');
END;
-- +goose StatementEnd

CREATE TABLE provider_attempts_old (
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

INSERT INTO provider_attempts_old (id, purchase_id, op, idem_key, outcome, payment_id, status, latency_ns, error, actor, lease_token, applied, note, at)
SELECT id, purchase_id, op, idem_key, outcome, payment_id, status, latency_ns, error, actor, lease_token, applied, note, at FROM provider_attempts
WHERE refund_id IS NULL;

DROP TABLE provider_attempts;

ALTER TABLE provider_attempts_old RENAME TO provider_attempts;

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

-- +goose StatementBegin
CREATE TRIGGER provider_attempts_no_replace
BEFORE INSERT ON provider_attempts
FOR EACH ROW
WHEN EXISTS (SELECT 1 FROM provider_attempts WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'provider_attempts is append-only: REPLACE of row ' || NEW.id || ' refused');
END;
-- +goose StatementEnd

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
    FOREIGN KEY (from_state, to_state) REFERENCES allowed_transitions (from_state, to_state)
) STRICT;

INSERT INTO transitions_old (id, purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at)
SELECT id, purchase_id, from_state, to_state, cause, evidence, actor, lease_token, at FROM transitions
WHERE refund_id IS NULL;

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

DROP TABLE refunds;

CREATE TABLE audit_findings_old (
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

INSERT INTO audit_findings_old (id, provider, payment_id, kind, purchase_id, amount, currency, status, evidence, found_at, closed_at, closed_by, close_note)
SELECT id, provider, payment_id, kind, purchase_id, amount, currency, status, evidence, found_at, closed_at, closed_by, close_note FROM audit_findings
WHERE kind NOT IN ('orphan_refund', 'refund_mismatch');

DROP TABLE audit_findings;

ALTER TABLE audit_findings_old RENAME TO audit_findings;

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

DROP TRIGGER refund_allowed_transitions_no_delete;
DROP TRIGGER refund_allowed_transitions_no_update;
DROP TRIGGER refund_allowed_transitions_no_insert;
DROP TABLE refund_allowed_transitions;
DROP TABLE refund_states;
