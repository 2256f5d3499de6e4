-- payrecon: the transition guard compiled into its trigger's condition.
--
-- The guard (00001) ran a PL/pgSQL function for every write of a
-- purchase's state, and the function looked the move up in
-- allowed_transitions: about 20 µs a row, as much as the update itself.
-- allowed_transitions refuses every change (00004), so its rows can be
-- compiled into the trigger's WHEN condition once, here, from the table
-- itself: the condition is plain expression evaluation, and the function
-- (which raises the same error, PR001, naming the move) runs only for a
-- forbidden write. A new state or move means a new migration that
-- recreates this trigger, which is also where the table's rows change.

-- +goose Up

DROP TRIGGER purchases_guard_transition ON purchases;
DROP TRIGGER purchases_guard_insert ON purchases;

CREATE TRIGGER purchases_guard_insert
    BEFORE INSERT ON purchases
    FOR EACH ROW WHEN (NEW.state IS DISTINCT FROM 'created')
    EXECUTE FUNCTION purchases_guard_state();

-- +goose StatementBegin
DO $$
DECLARE
    allowed text;
BEGIN
    SELECT string_agg(format('(%L, %L)', from_state, to_state), ', ' ORDER BY from_state, to_state)
    INTO STRICT allowed
    FROM allowed_transitions;
    EXECUTE format($t$
        CREATE TRIGGER purchases_guard_transition
            BEFORE UPDATE OF state ON purchases
            FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state
                AND (OLD.state, NEW.state) NOT IN (%s))
            EXECUTE FUNCTION purchases_guard_state()$t$, allowed);
END;
$$;
-- +goose StatementEnd

-- +goose Down

DROP TRIGGER purchases_guard_transition ON purchases;
DROP TRIGGER purchases_guard_insert ON purchases;

CREATE TRIGGER purchases_guard_insert
    BEFORE INSERT ON purchases
    FOR EACH ROW EXECUTE FUNCTION purchases_guard_state();

CREATE TRIGGER purchases_guard_transition
    BEFORE UPDATE OF state ON purchases
    FOR EACH ROW EXECUTE FUNCTION purchases_guard_state();
