-- payrecon: refunds, their own process beside the purchase's, for
-- PostgreSQL.
--
-- What and why:
--
--   * refund_states and refund_allowed_transitions: the refund machine of
--     package statemachine (statemachine.Refund.Transitions(); a test
--     compares the two). Like allowed_transitions (00004), the table
--     refuses INSERT, UPDATE, DELETE and TRUNCATE: it changes only by
--     migration.
--
--   * refunds (reconcile.Refund): one row per refund, with its own id
--     (ref_...), the purchase it belongs to, the payment it refunds (the
--     purchase's own, or a duplicate charge's an audit finding names), its
--     provider key (fixed at insert, unique), the exact request stored
--     before the first call and its hash, and the provider's refund id
--     once known (unique). A guard refuses a refund inserted in another
--     state than created and every state write that is not in
--     refund_allowed_transitions (SQLSTATE PR001, as the purchases'
--     guard, compiled into the trigger's WHEN condition as 00008 does for
--     purchases). The amount, the payment, the purchase and the finding
--     are fixed at insert: a trigger refuses an UPDATE of any of them
--     (PR002), so that no write can move a refund past the limits below.
--
--   * The limits, checked by a trigger on every insert of a refund:
--       - a refund naming no finding (finding_id NULL) needs its purchase
--         to be succeeded and its payment to be the purchase's payment
--         (provider_payment_id); else PR004 (not refundable);
--       - a refund naming a finding needs that finding to be about that
--         payment and that purchase, and about a charge (not one of the
--         refund findings, whose payment_id is a refund's id); else PR004;
--       - the refunds of one payment in any state but failed (pending ones
--         count) add up to at most the payment's amount: the purchase's
--         amount for its own payment, the finding's amount for a finding's
--         payment; else PR003 (exceeds).
--     The trigger takes a transaction-level advisory lock on the payment
--     (pg_advisory_xact_lock(1919247974, hashtext(payment_id))) before it
--     reads anything: inserts of refunds of one payment take turns, each
--     waiting for the one before to commit or roll back. The store's
--     transactions are READ COMMITTED, so the sum, read by the statement
--     after the lock, sees every refund committed before it: two inserts
--     that together exceed the amount cannot both commit. (A hash
--     collision between two payments only makes them take turns too.)
--
--   * transitions, provider_attempts and operator_actions get refund_id:
--     NULL for a purchase's own rows, the refund for a refund's. The
--     foreign key (refund_id, purchase_id) to refunds (id, purchase_id)
--     also holds a refund's row to the refund's purchase. An index per
--     table lists a refund's rows; the append-only triggers of 00001 and
--     00002 hold for the new column as for the others. operator_actions
--     may record a 'refund' action (an operator's "refund this charge").
--
--   * transitions_move_check replaces transitions_move_fkey (00004): a
--     purchase's row holds a move of allowed_transitions, a refund's row
--     a move of refund_allowed_transitions. Both tables refuse changes, so
--     their rows are compiled into the check, here, from the tables
--     themselves (as 00008 compiles the purchases' guard): a plain
--     expression, cheaper than the foreign key's lookup on every row of
--     the audit. A migration that changes either table recreates it.
--
--   * jobs get a kind: 'purchase' (the job moves a purchase) or 'refund'
--     (it moves a refund, refund_id, of the purchase purchase_id). id,
--     the job's primary key and the id every job method takes, is derived
--     (a stored generated column): the refund id of a refund's job, the
--     purchase id of a purchase's, so the two cannot disagree and a
--     purchase has at most one purchase job (its id is the purchase's).
--     purchase_id is no longer unique: a purchase's refunds' jobs name it
--     too. (No partial unique index on purchase_id for the purchase jobs:
--     the primary key on id already makes it unique, and every claim
--     would pay for one more index entry.) jobs_due_idx is rebuilt on
--     (run_at, id), the claim's order, holding the due, unleased jobs of
--     both kinds, so that the claim still reads its batch off its front.
--
--   * audit_findings.kind admits 'orphan_refund' and 'refund_mismatch'.
--
--   * Refunds have no state counters (there are few of them, and moves
--     of refunds are rare next to purchases'): CountRefundsByState counts
--     refunds_state_idx, and the periodic reads have partial indexes that
--     hold only what they ask for (refunds_overdue_idx,
--     refunds_uncertain_since_idx, refunds_escalated_at_idx).
--
-- SQLSTATEs raised here (the Go store translates them):
--   PR001  forbidden transition of a refund, or a refund inserted in
--          another state than created (as for purchases)
--   PR002  a change to refund_allowed_transitions, or to a refund's
--          amount, payment, purchase or finding
--   PR003  the refunds of a payment would exceed its amount
--   PR004  not refundable: the purchase is not succeeded, the payment is
--          not the purchase's, or the finding does not name it
--
-- The Down drops the refunds, and with them the refunds' rows of the
-- audit, their jobs and the refund findings: the schema before it has no
-- place for them.

-- +goose Up

CREATE TABLE refund_states (
    state text PRIMARY KEY
);

INSERT INTO refund_states (state) VALUES
    ('created'),
    ('submitted'),
    ('uncertain'),
    ('reconciling'),
    ('succeeded'),
    ('failed');

CREATE TABLE refund_allowed_transitions (
    from_state text NOT NULL REFERENCES refund_states (state),
    to_state   text NOT NULL REFERENCES refund_states (state),
    PRIMARY KEY (from_state, to_state)
);

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

CREATE TRIGGER refund_allowed_transitions_read_only
    BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON refund_allowed_transitions
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_table_change();

ALTER TABLE audit_findings DROP CONSTRAINT audit_findings_kind_check;
ALTER TABLE audit_findings ADD CONSTRAINT audit_findings_kind_check CHECK (kind IN (
    'orphan_charge', 'duplicate_charge', 'amount_mismatch',
    'currency_mismatch', 'state_disagreement', 'missing_at_provider',
    'orphan_refund', 'refund_mismatch'));

CREATE TABLE refunds (
    id                 text        PRIMARY KEY CHECK (id <> ''),
    purchase_id        text        NOT NULL REFERENCES purchases (id),
    -- The provider's payment refunded: the purchase's own, or the one an
    -- audit finding names.
    payment_id         text        NOT NULL CHECK (payment_id <> ''),
    -- The audit finding whose payment is refunded, for a duplicate
    -- charge's refund. Not a foreign key: the limits' trigger checks it at
    -- insert, findings are never deleted (00004), and a foreign key would
    -- change how audit_findings refuses a TRUNCATE.
    finding_id         bigint      NULL,
    amount             bigint      NOT NULL CHECK (amount > 0),
    currency           text        NOT NULL,
    reason             text        NOT NULL DEFAULT '',
    -- The purchase API client that asked for it; NULL for none, as for
    -- purchases (00005).
    client             text        NULL CONSTRAINT refunds_client_not_empty CHECK (client <> ''),
    requested_by       text        NOT NULL DEFAULT '',
    state              text        NOT NULL REFERENCES refund_states (state),
    version            bigint      NOT NULL,
    provider_key       text        NOT NULL UNIQUE CHECK (provider_key <> ''),
    provider_request   jsonb       NOT NULL,
    params_hash        text        NOT NULL CHECK (params_hash <> ''),
    provider_refund_id text        NULL UNIQUE,
    failure_reason     text        NOT NULL DEFAULT '',
    first_attempt_at   timestamptz NULL,
    uncertain_since    timestamptz NULL,
    escalated_at       timestamptz NULL,
    escalation_reason  text        NULL,
    settled_at         timestamptz NULL,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    -- The target of the audit's and the jobs' foreign keys, which hold a
    -- refund's rows to its purchase.
    CONSTRAINT refunds_id_purchase_key UNIQUE (id, purchase_id)
);

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

-- refunds_guard_state raises PR001 naming the refused write; the
-- triggers' WHEN conditions call it only for a forbidden one.
-- +goose StatementBegin
CREATE FUNCTION refunds_guard_state() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        RAISE EXCEPTION 'forbidden transition: refund % inserted in state %, a refund starts in created',
            NEW.id, NEW.state
            USING ERRCODE = 'PR001';
    END IF;
    RAISE EXCEPTION 'forbidden transition % -> % (refund %)', OLD.state, NEW.state, OLD.id
        USING ERRCODE = 'PR001';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER refunds_guard_insert
    BEFORE INSERT ON refunds
    FOR EACH ROW WHEN (NEW.state IS DISTINCT FROM 'created')
    EXECUTE FUNCTION refunds_guard_state();

-- +goose StatementBegin
DO $$
DECLARE
    allowed text;
BEGIN
    SELECT string_agg(format('(%L, %L)', from_state, to_state), ', ' ORDER BY from_state, to_state)
    INTO STRICT allowed
    FROM refund_allowed_transitions;
    EXECUTE format($t$
        CREATE TRIGGER refunds_guard_transition
            BEFORE UPDATE OF state ON refunds
            FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state
                AND (OLD.state, NEW.state) NOT IN (%s))
            EXECUTE FUNCTION refunds_guard_state()$t$, allowed);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION refunds_refuse_fixed_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'refunds: the amount, payment, purchase and finding of refund % are fixed at insert: UPDATE refused', OLD.id
        USING ERRCODE = 'PR002';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER refunds_fixed
    BEFORE UPDATE OF amount, payment_id, purchase_id, finding_id ON refunds
    FOR EACH ROW WHEN (NEW.amount IS DISTINCT FROM OLD.amount
        OR NEW.payment_id IS DISTINCT FROM OLD.payment_id
        OR NEW.purchase_id IS DISTINCT FROM OLD.purchase_id
        OR NEW.finding_id IS DISTINCT FROM OLD.finding_id)
    EXECUTE FUNCTION refunds_refuse_fixed_change();

-- refunds_check_limits refuses a refund its purchase or finding does not
-- allow (PR004), and one that would take the refunds of its payment past
-- the payment's amount (PR003). A missing purchase, a NULL or an amount
-- that is not positive it leaves to the constraints, which name them.
-- +goose StatementBegin
CREATE FUNCTION refunds_check_limits() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    p_state   text;
    p_payment text;
    f_payment text;
    f_purchase text;
    f_kind    text;
    cap       bigint;
    taken     bigint;
BEGIN
    IF coalesce(NEW.payment_id, '') = '' OR NEW.purchase_id IS NULL OR NEW.amount IS NULL OR NEW.amount <= 0 THEN
        RETURN NEW;
    END IF;
    -- One payment's refunds are inserted one at a time: the sum below is
    -- read once every insert before this one has committed or rolled
    -- back.
    PERFORM pg_advisory_xact_lock(1919247974, hashtext(NEW.payment_id));

    IF NEW.finding_id IS NULL THEN
        SELECT state, provider_payment_id, amount INTO p_state, p_payment, cap
        FROM purchases WHERE id = NEW.purchase_id;
        IF NOT FOUND THEN
            RETURN NEW; -- the foreign key refuses it
        END IF;
        IF p_state IS DISTINCT FROM 'succeeded' THEN
            RAISE EXCEPTION 'not refundable: purchase % is %, not succeeded (refund %)', NEW.purchase_id, p_state, NEW.id
                USING ERRCODE = 'PR004';
        END IF;
        IF p_payment IS DISTINCT FROM NEW.payment_id THEN
            RAISE EXCEPTION 'not refundable: payment % is not the payment of purchase % (%) (refund %)',
                NEW.payment_id, NEW.purchase_id, coalesce(p_payment, 'none'), NEW.id
                USING ERRCODE = 'PR004';
        END IF;
    ELSE
        SELECT payment_id, purchase_id, kind, amount INTO f_payment, f_purchase, f_kind, cap
        FROM audit_findings WHERE id = NEW.finding_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'not refundable: no finding % (refund %)', NEW.finding_id, NEW.id
                USING ERRCODE = 'PR004';
        END IF;
        IF f_payment IS DISTINCT FROM NEW.payment_id OR f_purchase IS DISTINCT FROM NEW.purchase_id THEN
            RAISE EXCEPTION 'not refundable: finding % is about payment % of purchase %, not payment % of purchase % (refund %)',
                NEW.finding_id, f_payment, coalesce(f_purchase, 'none'), NEW.payment_id, NEW.purchase_id, NEW.id
                USING ERRCODE = 'PR004';
        END IF;
        IF f_kind IN ('orphan_refund', 'refund_mismatch') THEN
            RAISE EXCEPTION 'not refundable: finding % is an % finding, about a refund, not a charge (refund %)',
                NEW.finding_id, f_kind, NEW.id
                USING ERRCODE = 'PR004';
        END IF;
    END IF;

    SELECT coalesce(sum(amount), 0) INTO taken
    FROM refunds WHERE payment_id = NEW.payment_id AND state <> 'failed';
    IF taken + NEW.amount > cap THEN
        RAISE EXCEPTION 'refund exceeds the payment: refund % of % would take the refunds of payment % to % of its %',
            NEW.id, NEW.amount, NEW.payment_id, taken + NEW.amount, cap
            USING ERRCODE = 'PR003';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- Named after the guard, so that it runs after it (BEFORE triggers run
-- in name order): a refund inserted in another state is refused as such.
CREATE TRIGGER refunds_limits
    BEFORE INSERT ON refunds
    FOR EACH ROW EXECUTE FUNCTION refunds_check_limits();

-- The audit: a refund's rows.

ALTER TABLE transitions ADD COLUMN refund_id text NULL;
ALTER TABLE transitions ADD CONSTRAINT transitions_refund_fkey
    FOREIGN KEY (refund_id, purchase_id) REFERENCES refunds (id, purchase_id);
CREATE INDEX transitions_refund_idx ON transitions (refund_id, id) WHERE refund_id IS NOT NULL;

ALTER TABLE provider_attempts ADD COLUMN refund_id text NULL;
ALTER TABLE provider_attempts ADD CONSTRAINT provider_attempts_refund_fkey
    FOREIGN KEY (refund_id, purchase_id) REFERENCES refunds (id, purchase_id);
CREATE INDEX provider_attempts_refund_idx ON provider_attempts (refund_id, id) WHERE refund_id IS NOT NULL;

ALTER TABLE operator_actions ADD COLUMN refund_id text NULL;
ALTER TABLE operator_actions ADD CONSTRAINT operator_actions_refund_fkey
    FOREIGN KEY (refund_id, purchase_id) REFERENCES refunds (id, purchase_id);
CREATE INDEX operator_actions_refund_idx ON operator_actions (refund_id, id) WHERE refund_id IS NOT NULL;
ALTER TABLE operator_actions DROP CONSTRAINT operator_actions_action_check;
ALTER TABLE operator_actions ADD CONSTRAINT operator_actions_action_check
    CHECK (action IN ('recheck', 'resolve', 'note', 'refund'));

-- The store maps a violation of this constraint, by its name, to
-- reconcile.ErrForbiddenTransition.
-- +goose StatementBegin
DO $$
DECLARE
    purchase_moves text;
    refund_moves   text;
BEGIN
    SELECT string_agg(format('(%L, %L)', from_state, to_state), ', ' ORDER BY from_state, to_state)
    INTO STRICT purchase_moves
    FROM allowed_transitions;
    SELECT string_agg(format('(%L, %L)', from_state, to_state), ', ' ORDER BY from_state, to_state)
    INTO STRICT refund_moves
    FROM refund_allowed_transitions;
    EXECUTE format($t$
        ALTER TABLE transitions ADD CONSTRAINT transitions_move_check CHECK (CASE
            WHEN refund_id IS NULL THEN (from_state, to_state) IN (%s)
            ELSE (from_state, to_state) IN (%s)
        END)$t$, purchase_moves, refund_moves);
END;
$$;
-- +goose StatementEnd

ALTER TABLE transitions DROP CONSTRAINT transitions_move_fkey;

-- Jobs of two kinds.

ALTER TABLE jobs
    ADD COLUMN kind text NOT NULL DEFAULT 'purchase' CONSTRAINT jobs_kind_check CHECK (kind IN ('purchase', 'refund')),
    ADD COLUMN refund_id text NULL,
    ADD CONSTRAINT jobs_refund_kind_check CHECK ((kind = 'refund') = (refund_id IS NOT NULL)),
    ADD CONSTRAINT jobs_refund_fkey FOREIGN KEY (refund_id, purchase_id) REFERENCES refunds (id, purchase_id);
ALTER TABLE jobs ADD COLUMN id text GENERATED ALWAYS AS (coalesce(refund_id, purchase_id)) STORED;
ALTER TABLE jobs DROP CONSTRAINT jobs_pkey;
ALTER TABLE jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);

DROP INDEX jobs_due_idx;
CREATE INDEX jobs_due_idx ON jobs (run_at, id)
    WHERE done_at IS NULL AND lease_owner IS NULL;

-- +goose Down

DROP INDEX jobs_due_idx;
DELETE FROM jobs WHERE kind = 'refund';
ALTER TABLE jobs DROP CONSTRAINT jobs_pkey;
ALTER TABLE jobs DROP COLUMN id;
ALTER TABLE jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (purchase_id);
ALTER TABLE jobs
    DROP CONSTRAINT jobs_refund_fkey,
    DROP CONSTRAINT jobs_refund_kind_check,
    DROP COLUMN refund_id,
    DROP COLUMN kind;
CREATE INDEX jobs_due_idx ON jobs (run_at, purchase_id)
    WHERE done_at IS NULL AND lease_owner IS NULL;

-- The refunds' rows of the audit go with the refunds.
ALTER TABLE transitions DISABLE TRIGGER transitions_append_only;
ALTER TABLE provider_attempts DISABLE TRIGGER provider_attempts_append_only;
ALTER TABLE operator_actions DISABLE TRIGGER operator_actions_append_only;
ALTER TABLE audit_findings DISABLE TRIGGER audit_findings_append_only;
DELETE FROM transitions WHERE refund_id IS NOT NULL;
DELETE FROM provider_attempts WHERE refund_id IS NOT NULL;
DELETE FROM operator_actions WHERE refund_id IS NOT NULL OR action = 'refund';
DELETE FROM audit_findings WHERE kind IN ('orphan_refund', 'refund_mismatch');
ALTER TABLE audit_findings ENABLE TRIGGER audit_findings_append_only;
ALTER TABLE operator_actions ENABLE TRIGGER operator_actions_append_only;
ALTER TABLE provider_attempts ENABLE TRIGGER provider_attempts_append_only;
ALTER TABLE transitions ENABLE TRIGGER transitions_append_only;

ALTER TABLE transitions
    ADD CONSTRAINT transitions_move_fkey FOREIGN KEY (from_state, to_state)
    REFERENCES allowed_transitions (from_state, to_state);
ALTER TABLE transitions DROP CONSTRAINT transitions_move_check;

ALTER TABLE operator_actions DROP CONSTRAINT operator_actions_action_check;
ALTER TABLE operator_actions ADD CONSTRAINT operator_actions_action_check
    CHECK (action IN ('recheck', 'resolve', 'note'));
DROP INDEX operator_actions_refund_idx;
ALTER TABLE operator_actions DROP CONSTRAINT operator_actions_refund_fkey, DROP COLUMN refund_id;
DROP INDEX provider_attempts_refund_idx;
ALTER TABLE provider_attempts DROP CONSTRAINT provider_attempts_refund_fkey, DROP COLUMN refund_id;
DROP INDEX transitions_refund_idx;
ALTER TABLE transitions DROP CONSTRAINT transitions_refund_fkey, DROP COLUMN refund_id;

DROP TABLE refunds;
DROP FUNCTION refunds_check_limits();
DROP FUNCTION refunds_refuse_fixed_change();
DROP FUNCTION refunds_guard_state();

ALTER TABLE audit_findings DROP CONSTRAINT audit_findings_kind_check;
ALTER TABLE audit_findings ADD CONSTRAINT audit_findings_kind_check CHECK (kind IN (
    'orphan_charge', 'duplicate_charge', 'amount_mismatch',
    'currency_mismatch', 'state_disagreement', 'missing_at_provider'));

DROP TRIGGER refund_allowed_transitions_read_only ON refund_allowed_transitions;
DROP TABLE refund_allowed_transitions;
DROP TABLE refund_states;
