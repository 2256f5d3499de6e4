-- payrecon core schema for PostgreSQL.
--
-- The transition table of package statemachine is loaded into
-- allowed_transitions, and a trigger refuses every write of
-- purchases.state that is not in it, so that no SQL path (the store, a
-- script, an operator's psql session) can record a forbidden move.
-- The audit tables (transitions, provider_attempts) are append-only.
--
-- SQLSTATEs raised here (the Go store translates them):
--   PR001  forbidden transition (or a purchase inserted in another state
--          than created)
--   PR002  UPDATE, DELETE or TRUNCATE on an append-only audit table

-- +goose Up

CREATE TABLE purchase_states (
    state text PRIMARY KEY
);

INSERT INTO purchase_states (state) VALUES
    ('created'),
    ('submitted'),
    ('uncertain'),
    ('reconciling'),
    ('succeeded'),
    ('declined');

CREATE TABLE allowed_transitions (
    from_state text NOT NULL REFERENCES purchase_states (state),
    to_state   text NOT NULL REFERENCES purchase_states (state),
    PRIMARY KEY (from_state, to_state)
);

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
    id                  text        PRIMARY KEY,
    customer            text        NOT NULL,
    reference           text        NULL,
    amount              bigint      NOT NULL CHECK (amount > 0),
    currency            text        NOT NULL,
    description         text        NOT NULL DEFAULT '',
    payment_method      text        NOT NULL DEFAULT '',
    state               text        NOT NULL REFERENCES purchase_states (state),
    version             bigint      NOT NULL,
    provider_key        text        NULL UNIQUE,
    provider_request    jsonb       NULL,
    params_hash         text        NULL,
    provider_payment_id text        NULL UNIQUE,
    first_attempt_at    timestamptz NULL,
    uncertain_since     timestamptz NULL,
    escalated_at        timestamptz NULL,
    escalation_reason   text        NULL,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL
);

CREATE UNIQUE INDEX purchases_customer_reference_key
    ON purchases (customer, reference) WHERE reference IS NOT NULL;
CREATE INDEX purchases_escalated_at_idx
    ON purchases (escalated_at) WHERE escalated_at IS NOT NULL;
CREATE INDEX purchases_state_idx ON purchases (state);

-- +goose StatementBegin
CREATE FUNCTION purchases_guard_state() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state IS DISTINCT FROM 'created' THEN
            RAISE EXCEPTION 'forbidden transition: purchase % inserted in state %, a purchase starts in created',
                NEW.id, NEW.state
                USING ERRCODE = 'PR001';
        END IF;
        RETURN NEW;
    END IF;

    IF NEW.state IS DISTINCT FROM OLD.state AND NOT EXISTS (
        SELECT 1 FROM allowed_transitions
        WHERE from_state = OLD.state AND to_state = NEW.state
    ) THEN
        RAISE EXCEPTION 'forbidden transition % -> % (purchase %)', OLD.state, NEW.state, OLD.id
            USING ERRCODE = 'PR001';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER purchases_guard_insert
    BEFORE INSERT ON purchases
    FOR EACH ROW EXECUTE FUNCTION purchases_guard_state();

CREATE TRIGGER purchases_guard_transition
    BEFORE UPDATE OF state ON purchases
    FOR EACH ROW EXECUTE FUNCTION purchases_guard_state();

-- +goose StatementBegin
CREATE FUNCTION refuse_audit_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'PR002';
END;
$$;
-- +goose StatementEnd

CREATE TABLE transitions (
    id          bigserial   PRIMARY KEY,
    purchase_id text        NOT NULL REFERENCES purchases (id),
    from_state  text        NOT NULL,
    to_state    text        NOT NULL,
    cause       text        NOT NULL,
    evidence    text        NOT NULL DEFAULT '',
    actor       text        NOT NULL DEFAULT '',
    lease_token bigint      NOT NULL DEFAULT 0,
    at          timestamptz NOT NULL
);

CREATE INDEX transitions_purchase_idx ON transitions (purchase_id, id);

CREATE TRIGGER transitions_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON transitions
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_change();

CREATE TABLE provider_attempts (
    id          bigserial   PRIMARY KEY,
    purchase_id text        NOT NULL REFERENCES purchases (id),
    op          text        NOT NULL,
    idem_key    text        NOT NULL DEFAULT '',
    outcome     text        NOT NULL,
    payment_id  text        NOT NULL DEFAULT '',
    status      text        NOT NULL DEFAULT '',
    latency_ns  bigint      NOT NULL DEFAULT 0, -- time.Duration, exact
    error       text        NOT NULL DEFAULT '',
    actor       text        NOT NULL DEFAULT '',
    lease_token bigint      NOT NULL DEFAULT 0,
    applied     boolean     NOT NULL,
    note        text        NOT NULL DEFAULT '',
    at          timestamptz NOT NULL
);

CREATE INDEX provider_attempts_purchase_idx ON provider_attempts (purchase_id, id);

CREATE TRIGGER provider_attempts_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON provider_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_audit_change();

CREATE TABLE jobs (
    purchase_id      text        PRIMARY KEY REFERENCES purchases (id),
    run_at           timestamptz NOT NULL,
    lease_owner      text        NULL,
    lease_token      bigint      NOT NULL DEFAULT 0,
    lease_expires_at timestamptz NULL,
    checks           integer     NOT NULL DEFAULT 0,
    done_at          timestamptz NULL,
    CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
);

-- Claiming scans open jobs in run_at order.
CREATE INDEX jobs_claim_idx ON jobs (run_at) WHERE done_at IS NULL;

-- +goose Down

DROP TABLE jobs;
DROP TABLE provider_attempts;
DROP TABLE transitions;
DROP FUNCTION refuse_audit_change();
DROP TABLE purchases;
DROP FUNCTION purchases_guard_state();
DROP TABLE allowed_transitions;
DROP TABLE purchase_states;
