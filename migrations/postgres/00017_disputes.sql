-- payrecon: disputes, a cardholder's challenge of a payment, beside the
-- purchase's and the refunds' processes, for PostgreSQL.
--
-- What and why:
--
--   * dispute_states and dispute_allowed_transitions: the dispute machine
--     of package statemachine (statemachine.Dispute.Transitions(); a test
--     compares the two). Like refund_allowed_transitions (00009), the
--     table refuses INSERT, UPDATE, DELETE and TRUNCATE: it changes only
--     by migration.
--
--   * disputes (reconcile.Dispute): one row per dispute, with payrecon's
--     id (dsp_...), the provider's (unique: the card network opens a
--     dispute once, and every event about it names the same id), the
--     purchase and the payment disputed, the money disputed, and what the
--     provider last said of it (its status, whether it is an inquiry, the
--     evidence due date, whether the payment may still be refunded, the
--     money withdrawn and reinstated, the time of that answer). A guard
--     refuses a dispute inserted in another state than open and every
--     state write that is not in dispute_allowed_transitions (SQLSTATE
--     PR001, compiled into the trigger's WHEN condition as 00009 does for
--     refunds). The purchase, the payment, the provider's id, the amount
--     and the currency are fixed at insert (PR002): what was disputed
--     never changes, only what became of it.
--
--   * The refunds' limits (refunds_check_limits of 00009) learn of
--     disputes:
--       - a finding about a dispute (foreign_dispute, dispute_mismatch,
--         dispute_exceeds) names a dispute, not a charge: not refundable
--         (PR004), as a refund finding is;
--       - the money a lost dispute returned to the cardholder counts with
--         the refunds of its payment: refunds and lost disputes together
--         stay within the payment's amount (PR003);
--       - a dispute that forbids a refund of its payment (open or
--         evidence submitted while the provider says the payment may not
--         be refunded, a chargeback; or lost) refuses it (PR005). The
--         network holds the money, or returned it already: a refund on
--         top would pay the cardholder twice.
--     PR003 is judged before PR005, so that a refund past what a lost
--     dispute left says so. Writes of disputes take no lock: the
--     provider's word on a dispute is never refused for a refund's sake,
--     so a refund that commits beside a dispute's change is as if it
--     committed just before it.
--
--   * transitions gets dispute_id: NULL for a purchase's and a refund's
--     rows, the dispute for a dispute's. The foreign key (dispute_id,
--     purchase_id) to disputes (id, purchase_id) also holds a dispute's
--     row to the dispute's purchase; a row is about one of a refund or a
--     dispute at most (transitions_subject_check). The append-only
--     triggers of 00001 and the purchase check of 00014 hold for the new
--     column as for the others.
--
--   * transitions_move_check is recreated: a dispute's row holds a move
--     of dispute_allowed_transitions, compiled into the check from the
--     tables as 00009 does.
--
--   * audit_findings.kind admits 'foreign_dispute', 'dispute_mismatch'
--     and 'dispute_exceeds'.
--
--   * webhook_inbox gets dispute: the dispute a webhook about one carries
--     (reconcile.InboxEvent.Dispute, provider.Dispute as JSON), NULL for
--     the other events, so that an unmatched dispute event is retried as
--     one.
--
--   * ListOpenDisputes reads disputes_open_idx, which holds only the
--     disputes not decided, by evidence due date (NULLs last, the
--     default order's) then id.
--
-- SQLSTATEs raised here (the Go store translates them):
--   PR001  forbidden transition of a dispute, or a dispute inserted in
--          another state than open (as for purchases and refunds)
--   PR002  a change to dispute_allowed_transitions, or to a dispute's
--          purchase, payment, provider id, amount or currency
--   PR003  the refunds and lost disputes of a payment would exceed its
--          amount
--   PR004  not refundable (as in 00009), or the finding is a dispute's
--   PR005  the payment is disputed: a dispute forbids its refund
--
-- The Down drops the disputes, and with them their rows of the audit,
-- the dispute findings and the inbox's disputes: the schema before it
-- has no place for them.

-- +goose Up

CREATE TABLE dispute_states (
    state text PRIMARY KEY
);

INSERT INTO dispute_states (state) VALUES
    ('open'),
    ('evidence_submitted'),
    ('won'),
    ('lost'),
    ('closed');

CREATE TABLE dispute_allowed_transitions (
    from_state text NOT NULL REFERENCES dispute_states (state),
    to_state   text NOT NULL REFERENCES dispute_states (state),
    PRIMARY KEY (from_state, to_state)
);

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

CREATE TRIGGER dispute_allowed_transitions_read_only
    BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON dispute_allowed_transitions
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_table_change();

ALTER TABLE audit_findings DROP CONSTRAINT audit_findings_kind_check;
ALTER TABLE audit_findings ADD CONSTRAINT audit_findings_kind_check CHECK (kind IN (
    'orphan_charge', 'duplicate_charge', 'amount_mismatch',
    'currency_mismatch', 'state_disagreement', 'missing_at_provider',
    'orphan_refund', 'refund_mismatch',
    'foreign_dispute', 'dispute_mismatch', 'dispute_exceeds'));

CREATE TABLE disputes (
    id                  text        PRIMARY KEY CHECK (id <> ''),
    provider_dispute_id text        NOT NULL UNIQUE CHECK (provider_dispute_id <> ''),
    purchase_id         text        NOT NULL REFERENCES purchases (id),
    -- The disputed payment: the purchase's own.
    payment_id          text        NOT NULL CHECK (payment_id <> ''),
    amount              bigint      NOT NULL CHECK (amount > 0),
    currency            text        NOT NULL CHECK (currency <> ''),
    reason              text        NOT NULL DEFAULT '',
    state               text        NOT NULL REFERENCES dispute_states (state),
    version             bigint      NOT NULL,
    provider_status     text        NOT NULL DEFAULT '',
    inquiry             boolean     NOT NULL DEFAULT false,
    evidence_due_by     timestamptz NULL,
    charge_refundable   boolean     NOT NULL DEFAULT false,
    withdrawn           bigint      NOT NULL DEFAULT 0 CHECK (withdrawn >= 0),
    reinstated          bigint      NOT NULL DEFAULT 0 CHECK (reinstated >= 0),
    provider_updated_at timestamptz NULL,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    closed_at           timestamptz NULL,
    -- The target of the audit's foreign key, which holds a dispute's rows
    -- to its purchase.
    CONSTRAINT disputes_id_purchase_key UNIQUE (id, purchase_id)
);

-- A purchase's disputes, oldest first.
CREATE INDEX disputes_purchase_idx ON disputes (purchase_id, created_at, id);
-- The refunds' limits: the disputes of one payment.
CREATE INDEX disputes_payment_idx ON disputes (payment_id);
-- ListOpenDisputes: the disputes not decided, soonest evidence due first.
CREATE INDEX disputes_open_idx ON disputes (evidence_due_by, id)
    WHERE state IN ('open', 'evidence_submitted');

-- disputes_guard_state raises PR001 naming the refused write; the
-- triggers' WHEN conditions call it only for a forbidden one.
-- +goose StatementBegin
CREATE FUNCTION disputes_guard_state() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        RAISE EXCEPTION 'forbidden transition: dispute % inserted in state %, a dispute starts in open',
            NEW.id, NEW.state
            USING ERRCODE = 'PR001';
    END IF;
    RAISE EXCEPTION 'forbidden transition % -> % (dispute %)', OLD.state, NEW.state, OLD.id
        USING ERRCODE = 'PR001';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER disputes_guard_insert
    BEFORE INSERT ON disputes
    FOR EACH ROW WHEN (NEW.state IS DISTINCT FROM 'open')
    EXECUTE FUNCTION disputes_guard_state();

-- +goose StatementBegin
DO $$
DECLARE
    allowed text;
BEGIN
    SELECT string_agg(format('(%L, %L)', from_state, to_state), ', ' ORDER BY from_state, to_state)
    INTO STRICT allowed
    FROM dispute_allowed_transitions;
    EXECUTE format($t$
        CREATE TRIGGER disputes_guard_transition
            BEFORE UPDATE OF state ON disputes
            FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state
                AND (OLD.state, NEW.state) NOT IN (%s))
            EXECUTE FUNCTION disputes_guard_state()$t$, allowed);
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION disputes_refuse_fixed_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'disputes: the purchase, payment, provider id, amount and currency of dispute % are fixed at insert: UPDATE refused', OLD.id
        USING ERRCODE = 'PR002';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER disputes_fixed
    BEFORE UPDATE OF purchase_id, payment_id, provider_dispute_id, amount, currency ON disputes
    FOR EACH ROW WHEN (NEW.purchase_id IS DISTINCT FROM OLD.purchase_id
        OR NEW.payment_id IS DISTINCT FROM OLD.payment_id
        OR NEW.provider_dispute_id IS DISTINCT FROM OLD.provider_dispute_id
        OR NEW.amount IS DISTINCT FROM OLD.amount
        OR NEW.currency IS DISTINCT FROM OLD.currency)
    EXECUTE FUNCTION disputes_refuse_fixed_change();

-- refunds_check_limits, as 00009 wrote it, with the disputes: a dispute
-- finding is not refundable (PR004), a lost dispute's amount counts with
-- the refunds (PR003), and a dispute that forbids a refund refuses it
-- (PR005). The trigger refunds_limits calls it by name.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION refunds_check_limits() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    p_state    text;
    p_payment  text;
    f_payment  text;
    f_purchase text;
    f_kind     text;
    cap        bigint;
    taken      bigint;
    lost       bigint;
    d_id       text;
    d_state    text;
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
        IF f_kind IN ('foreign_dispute', 'dispute_mismatch', 'dispute_exceeds') THEN
            RAISE EXCEPTION 'not refundable: finding % is a % finding, about a dispute, not a charge (refund %)',
                NEW.finding_id, f_kind, NEW.id
                USING ERRCODE = 'PR004';
        END IF;
    END IF;

    SELECT coalesce(sum(amount), 0) INTO taken
    FROM refunds WHERE payment_id = NEW.payment_id AND state <> 'failed';
    SELECT coalesce(sum(amount), 0) INTO lost
    FROM disputes WHERE payment_id = NEW.payment_id AND state = 'lost';
    IF taken + lost + NEW.amount > cap THEN
        RAISE EXCEPTION 'refund exceeds the payment: refund % of % would take the refunds of payment % to % of its % (% of it lost to disputes)',
            NEW.id, NEW.amount, NEW.payment_id, taken + lost + NEW.amount, cap, lost
            USING ERRCODE = 'PR003';
    END IF;

    SELECT id, state INTO d_id, d_state
    FROM disputes
    WHERE payment_id = NEW.payment_id
        AND ((state IN ('open', 'evidence_submitted') AND NOT charge_refundable) OR state = 'lost')
    ORDER BY id
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'payment disputed: payment % has dispute % in state %, which forbids a refund (refund %)',
            NEW.payment_id, d_id, d_state, NEW.id
            USING ERRCODE = 'PR005';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- The audit: a dispute's rows.

ALTER TABLE transitions ADD COLUMN dispute_id text NULL;
ALTER TABLE transitions ADD CONSTRAINT transitions_dispute_fkey
    FOREIGN KEY (dispute_id, purchase_id) REFERENCES disputes (id, purchase_id);
ALTER TABLE transitions ADD CONSTRAINT transitions_subject_check
    CHECK (refund_id IS NULL OR dispute_id IS NULL);
CREATE INDEX transitions_dispute_idx ON transitions (dispute_id, id) WHERE dispute_id IS NOT NULL;

-- The store maps a violation of this constraint, by its name, to
-- reconcile.ErrForbiddenTransition.
ALTER TABLE transitions DROP CONSTRAINT transitions_move_check;
-- +goose StatementBegin
DO $$
DECLARE
    purchase_moves text;
    refund_moves   text;
    dispute_moves  text;
BEGIN
    SELECT string_agg(format('(%L, %L)', from_state, to_state), ', ' ORDER BY from_state, to_state)
    INTO STRICT purchase_moves
    FROM allowed_transitions;
    SELECT string_agg(format('(%L, %L)', from_state, to_state), ', ' ORDER BY from_state, to_state)
    INTO STRICT refund_moves
    FROM refund_allowed_transitions;
    SELECT string_agg(format('(%L, %L)', from_state, to_state), ', ' ORDER BY from_state, to_state)
    INTO STRICT dispute_moves
    FROM dispute_allowed_transitions;
    EXECUTE format($t$
        ALTER TABLE transitions ADD CONSTRAINT transitions_move_check CHECK (CASE
            WHEN dispute_id IS NOT NULL THEN (from_state, to_state) IN (%s)
            WHEN refund_id IS NOT NULL THEN (from_state, to_state) IN (%s)
            ELSE (from_state, to_state) IN (%s)
        END)$t$, dispute_moves, refund_moves, purchase_moves);
END;
$$;
-- +goose StatementEnd

-- The inbox: a dispute event's dispute.

ALTER TABLE webhook_inbox ADD COLUMN dispute jsonb NULL;

-- +goose Down

ALTER TABLE webhook_inbox DROP COLUMN dispute;

-- The disputes' rows of the audit go with the disputes.
ALTER TABLE transitions DISABLE TRIGGER transitions_append_only;
ALTER TABLE audit_findings DISABLE TRIGGER audit_findings_append_only;
DELETE FROM transitions WHERE dispute_id IS NOT NULL;
DELETE FROM audit_findings WHERE kind IN ('foreign_dispute', 'dispute_mismatch', 'dispute_exceeds');
ALTER TABLE audit_findings ENABLE TRIGGER audit_findings_append_only;
ALTER TABLE transitions ENABLE TRIGGER transitions_append_only;

ALTER TABLE transitions DROP CONSTRAINT transitions_move_check;
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
DROP INDEX transitions_dispute_idx;
ALTER TABLE transitions
    DROP CONSTRAINT transitions_subject_check,
    DROP CONSTRAINT transitions_dispute_fkey,
    DROP COLUMN dispute_id;

-- refunds_check_limits as 00009 wrote it.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION refunds_check_limits() RETURNS trigger
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

DROP TABLE disputes;
DROP FUNCTION disputes_refuse_fixed_change();
DROP FUNCTION disputes_guard_state();

ALTER TABLE audit_findings DROP CONSTRAINT audit_findings_kind_check;
ALTER TABLE audit_findings ADD CONSTRAINT audit_findings_kind_check CHECK (kind IN (
    'orphan_charge', 'duplicate_charge', 'amount_mismatch',
    'currency_mismatch', 'state_disagreement', 'missing_at_provider',
    'orphan_refund', 'refund_mismatch'));

DROP TRIGGER dispute_allowed_transitions_read_only ON dispute_allowed_transitions;
DROP TABLE dispute_allowed_transitions;
DROP TABLE dispute_states;
