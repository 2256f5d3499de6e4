-- The audit rows' reference to their purchase, checked once per
-- statement, and the purchase's state checked by a CHECK.
--
-- A foreign key checks each inserted row alone: for every transition and
-- provider attempt, one lookup of its purchase, locked FOR KEY SHARE.
-- The worker's batched write (ApplyMoves) inserts hundreds of each in one
-- statement, and those per-row checks were about a fifth of its time. The
-- statement-level trigger below checks the same thing for the whole
-- statement at once, and refuses the statement when a purchase is
-- missing, with the foreign key's SQLSTATE (23503) and name, so that the
-- stores map it as before (reconcile.ErrNotFound, "purchase"). It takes
-- no lock: the foreign key's FOR KEY SHARE kept a purchase from being
-- deleted under the new rows before their commit, but payrecon never
-- deletes a purchase, and none can be deleted while its job exists (the
-- job's own foreign key, which stays). Taking the same locks in the
-- statement check measured slower than the per-row keys it replaces.
--
-- The delete side is kept too: a purchase that a transition or an
-- attempt names cannot be deleted (a statement-level check over the
-- deleted rows). A purchase's job refers to it by a foreign key as well,
-- so no purchase past its creation could be deleted anyway.
--
-- The purchase's state referred to purchase_states by a foreign key,
-- another per-row lookup on every move; a CHECK holds it to the same six
-- states at no lookup (TestSchemaTransitionTableMatchesStatemachine
-- holds the CHECK to package statemachine). purchase_states stays, for
-- allowed_transitions and purchase_state_counts.

-- +goose Up
ALTER TABLE transitions DROP CONSTRAINT transitions_purchase_id_fkey;
ALTER TABLE provider_attempts DROP CONSTRAINT provider_attempts_purchase_id_fkey;

-- +goose StatementBegin
CREATE FUNCTION audit_rows_check_purchases() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    missing text;
BEGIN
    SELECT n.purchase_id INTO missing FROM new_rows AS n
    WHERE NOT EXISTS (SELECT FROM purchases AS p WHERE p.id = n.purchase_id)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'insert or update on table "%" violates foreign key constraint "%"', TG_TABLE_NAME, TG_ARGV[0]
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = TG_ARGV[0], TABLE = TG_TABLE_NAME,
                  DETAIL = format('Key (purchase_id)=(%s) is not present in table "purchases".', missing);
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- The constraint names are the foreign keys' that they replace.
CREATE TRIGGER transitions_purchase_exists
    AFTER INSERT ON transitions REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION audit_rows_check_purchases('transitions_purchase_id_fkey');
CREATE TRIGGER provider_attempts_purchase_exists
    AFTER INSERT ON provider_attempts REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION audit_rows_check_purchases('provider_attempts_purchase_id_fkey');

-- +goose StatementBegin
CREATE FUNCTION purchases_refuse_referenced_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    referenced text;
BEGIN
    SELECT o.id INTO referenced FROM old_purchases AS o
    WHERE EXISTS (SELECT FROM transitions AS t WHERE t.purchase_id = o.id)
       OR EXISTS (SELECT FROM provider_attempts AS a WHERE a.purchase_id = o.id)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'update or delete on table "purchases" violates foreign key constraint "purchases_audit_rows" on its audit rows'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'purchases_audit_rows', TABLE = 'purchases',
                  DETAIL = format('Key (id)=(%s) is still referenced from table "transitions" or "provider_attempts".', referenced);
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER purchases_refuse_referenced_delete
    AFTER DELETE ON purchases REFERENCING OLD TABLE AS old_purchases
    FOR EACH STATEMENT EXECUTE FUNCTION purchases_refuse_referenced_delete();

ALTER TABLE purchases DROP CONSTRAINT purchases_state_fkey;
ALTER TABLE purchases ADD CONSTRAINT purchases_state_check
    CHECK (state IN ('created', 'submitted', 'uncertain', 'reconciling', 'succeeded', 'declined'));

-- +goose Down
ALTER TABLE purchases DROP CONSTRAINT purchases_state_check;
ALTER TABLE purchases ADD CONSTRAINT purchases_state_fkey
    FOREIGN KEY (state) REFERENCES purchase_states (state);
DROP TRIGGER purchases_refuse_referenced_delete ON purchases;
DROP FUNCTION purchases_refuse_referenced_delete();
DROP TRIGGER provider_attempts_purchase_exists ON provider_attempts;
DROP TRIGGER transitions_purchase_exists ON transitions;
DROP FUNCTION audit_rows_check_purchases();
ALTER TABLE provider_attempts ADD CONSTRAINT provider_attempts_purchase_id_fkey
    FOREIGN KEY (purchase_id) REFERENCES purchases (id);
ALTER TABLE transitions ADD CONSTRAINT transitions_purchase_id_fkey
    FOREIGN KEY (purchase_id) REFERENCES purchases (id);
