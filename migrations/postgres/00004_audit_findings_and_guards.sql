-- payrecon: settled purchases in doubt, the audit from the provider's
-- side, and a transition table the database holds to, for PostgreSQL.
--
-- What and why:
--
--   * purchases.settled_at and purchases.doubt: when the answer that made
--     a purchase final was given (a contradicting event older than it is
--     stale, a newer one is confirmed with the provider), and why a final
--     state must be confirmed ('' when it need not).
--
--   * webhook_inbox.amount, .currency, .event_created: what an event says
--     of its payment, kept so that an event applied later is judged as
--     fully as on arrival.
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
--     closes it once with a note. A trigger refuses any UPDATE but the
--     one that closes an open finding (closed_at, closed_by, close_note),
--     and DELETE and TRUNCATE, whatever SQL path tries.
--
--   * audit_links: the first money-taking payment the audit saw for a
--     purchase the books link to no payment, so that a second one is a
--     duplicate across chunks, runs and resumptions.
--
--   * audit_runs: the resumable watermark of each audit (reconcile.AuditRun).
--
--   * transitions gets a foreign key (from_state, to_state) to
--     allowed_transitions: the audit can record only moves of the
--     transition table, as purchases.state can only make them. Adding it
--     checks the rows already there (the store never wrote any other).
--
--   * allowed_transitions refuses INSERT, UPDATE, DELETE and TRUNCATE: the
--     table is statemachine.Transitions(), loaded by 00001, and changes
--     only with a migration (which disables the trigger for its change).
--
-- SQLSTATEs raised here (as in 00001):
--   PR002  a change to audit_findings other than closing an open finding,
--          or any change to allowed_transitions

-- +goose Up

ALTER TABLE purchases
    ADD COLUMN settled_at timestamptz NULL,
    ADD COLUMN doubt      text        NOT NULL DEFAULT '';

-- What an event says of the payment's amount and currency and when the
-- provider created it, so that an event applied later (unmatched at
-- first) is judged as fully as one applied on arrival.
ALTER TABLE webhook_inbox
    ADD COLUMN amount        bigint      NOT NULL DEFAULT 0,
    ADD COLUMN currency      text        NOT NULL DEFAULT '',
    ADD COLUMN event_created timestamptz NULL;

CREATE INDEX purchases_first_attempt_idx ON purchases (state, first_attempt_at)
    WHERE first_attempt_at IS NOT NULL;

CREATE TABLE audit_findings (
    id          bigserial   PRIMARY KEY,
    provider    text        NOT NULL CHECK (provider <> ''),
    payment_id  text        NOT NULL CHECK (payment_id <> ''),
    kind        text        NOT NULL CHECK (kind IN (
                    'orphan_charge', 'duplicate_charge', 'amount_mismatch',
                    'currency_mismatch', 'state_disagreement', 'missing_at_provider')),
    -- The purchase the finding concerns. Not a foreign key: an orphan
    -- names an unknown purchase id, or none (NULL).
    purchase_id text        NULL,
    amount      bigint      NOT NULL, -- the provider's payment's, minor units
    currency    text        NOT NULL DEFAULT '',
    status      text        NOT NULL DEFAULT '',
    evidence    text        NOT NULL DEFAULT '',
    found_at    timestamptz NOT NULL,
    closed_at   timestamptz NULL,
    closed_by   text        NOT NULL DEFAULT '',
    close_note  text        NOT NULL DEFAULT '',
    UNIQUE (provider, payment_id, kind),
    -- Open: nobody closed it. Closed: by someone, with a note.
    CONSTRAINT audit_findings_closed_check CHECK (CASE
        WHEN closed_at IS NULL THEN closed_by = '' AND close_note = ''
        ELSE closed_by <> '' AND close_note <> ''
    END)
);

-- The open findings, oldest first: the operator's list and the metrics.
CREATE INDEX audit_findings_open_idx ON audit_findings (found_at, id)
    WHERE closed_at IS NULL;
-- A purchase's findings.
CREATE INDEX audit_findings_purchase_idx ON audit_findings (purchase_id, found_at, id)
    WHERE purchase_id IS NOT NULL;

-- Only closing an open finding may change it: every other column (those
-- added later too) must stay as found.
-- +goose StatementBegin
CREATE FUNCTION audit_findings_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.closed_at IS NOT NULL THEN
        RAISE EXCEPTION 'audit_findings: finding % is closed: UPDATE refused', OLD.id
            USING ERRCODE = 'PR002';
    END IF;
    IF NEW.closed_at IS NULL
        OR (to_jsonb(NEW) - ARRAY['closed_at', 'closed_by', 'close_note'])
            IS DISTINCT FROM (to_jsonb(OLD) - ARRAY['closed_at', 'closed_by', 'close_note'])
    THEN
        RAISE EXCEPTION 'audit_findings: only closing may change finding %: UPDATE refused', OLD.id
            USING ERRCODE = 'PR002';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER audit_findings_guard_update
    BEFORE UPDATE ON audit_findings
    FOR EACH ROW EXECUTE FUNCTION audit_findings_guard();

CREATE TRIGGER audit_findings_append_only
    BEFORE DELETE OR TRUNCATE ON audit_findings
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_change();

-- The first payment that took money the audit saw for a purchase the
-- books linked to no payment yet (its outcome still unknown): a second one
-- is a duplicate charge, whichever run, chunk or resumption sees it.
CREATE TABLE audit_links (
    provider    text    NOT NULL CHECK (provider <> ''),
    purchase_id text    NOT NULL CHECK (purchase_id <> ''),
    payment_id  text    NOT NULL CHECK (payment_id <> ''),
    linked_at   timestamptz NOT NULL,
    PRIMARY KEY (provider, purchase_id)
);

CREATE TABLE audit_runs (
    name         text        PRIMARY KEY CHECK (name <> ''),
    window_from  timestamptz NULL,
    window_until timestamptz NULL,
    done_until   timestamptz NULL, -- everything created before it has been matched
    started_at   timestamptz NULL,
    updated_at   timestamptz NULL,
    findings     bigint      NOT NULL DEFAULT 0 CHECK (findings >= 0)
);

-- The store maps a violation of this constraint, by its name, to
-- reconcile.ErrForbiddenTransition.
ALTER TABLE transitions
    ADD CONSTRAINT transitions_move_fkey FOREIGN KEY (from_state, to_state)
    REFERENCES allowed_transitions (from_state, to_state);

-- +goose StatementBegin
CREATE FUNCTION refuse_table_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is read-only: % refused (it changes only by migration)', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'PR002';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER allowed_transitions_read_only
    BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON allowed_transitions
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_table_change();

-- +goose Down

DROP TRIGGER allowed_transitions_read_only ON allowed_transitions;
DROP FUNCTION refuse_table_change();
ALTER TABLE transitions DROP CONSTRAINT transitions_move_fkey;
DROP TABLE audit_runs;
DROP TABLE audit_links;
DROP TABLE audit_findings;
DROP FUNCTION audit_findings_guard();
DROP INDEX purchases_first_attempt_idx;
ALTER TABLE webhook_inbox
    DROP COLUMN event_created,
    DROP COLUMN currency,
    DROP COLUMN amount;
ALTER TABLE purchases
    DROP COLUMN doubt,
    DROP COLUMN settled_at;
