-- payrecon: how many purchases are in each state, kept by the database,
-- and the indexes of the periodic reads, for PostgreSQL.
--
-- The metrics read the number of purchases per state every 15 seconds.
-- Counting them (a GROUP BY over every purchase) grows with the table;
-- purchase_state_counts holds the counts instead, and the database keeps
-- it, so that no SQL path (the store, a batched write, a script, an
-- operator's psql session) can forget it:
--
--   * Statement-level AFTER triggers on purchases (INSERT, UPDATE,
--     DELETE) read the statement's transition tables (REFERENCING NEW
--     TABLE / OLD TABLE) and add one delta per state the statement
--     changed: a statement that moves 256 purchases writes one counter
--     row per state it touched, not one per purchase. An UPDATE that
--     moves no purchase to another state writes nothing. (PostgreSQL
--     refuses transition tables on a trigger with a column list, so the
--     UPDATE trigger fires on every UPDATE, and finds no delta when no
--     state changed.) TRUNCATE sets every count to 0.
--
--   * Each state's count is spread over 16 rows (shards) that add up to
--     it. A delta goes to the first shard of its state that no other
--     transaction holds (SELECT ... FOR UPDATE SKIP LOCKED), starting
--     from the one of the writing backend (pg_backend_pid() % 16), so
--     that concurrent writers neither wait for each other's commits nor
--     deadlock on the counters; only when all 16 are held does a writer
--     wait, for its own backend's shard. A shard may be negative (a
--     purchase counted in on one shard, out on another); the sum is the
--     count.
--
--   * Every write of a counter is in the transaction of the write it
--     counts, so a snapshot that sees a purchase's state sees it counted,
--     and a rollback (or a statement refused under a savepoint) undoes
--     both. The sum of a state's shards equals count(*) of the purchases
--     in that state in every snapshot.
--
--   * The migration fills the counts from the rows there are, under a
--     lock that holds writers off between the count and the triggers.

-- +goose Up

LOCK TABLE purchases IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE purchase_state_counts (
    state text     NOT NULL REFERENCES purchase_states (state),
    shard smallint NOT NULL CHECK (shard >= 0 AND shard < 16),
    n     bigint   NOT NULL,
    PRIMARY KEY (state, shard)
);

-- purchase_state_counts_add adds delta to the count of purchases in
-- state, on a shard no other transaction holds if there is one.
-- +goose StatementBegin
CREATE FUNCTION purchase_state_counts_add(count_state text, delta bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    home   smallint := pg_backend_pid() % 16;
    picked smallint;
BEGIN
    SELECT shard INTO picked
    FROM purchase_state_counts
    WHERE state = count_state
    ORDER BY (shard - home + 16) % 16
    LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        -- Every shard is held by another transaction (or the state has
        -- no row yet): wait for this backend's own.
        picked := home;
    END IF;
    INSERT INTO purchase_state_counts AS c (state, shard, n)
    VALUES (count_state, picked, delta)
    ON CONFLICT (state, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
END;
$$;
-- +goose StatementEnd

-- purchases_count_states adds a statement's deltas per state: its new
-- rows count in, its old rows count out.
-- +goose StatementBegin
CREATE FUNCTION purchases_count_states() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    d record;
BEGIN
    IF TG_OP = 'INSERT' THEN
        FOR d IN SELECT state, count(*) AS delta FROM new_purchases GROUP BY state ORDER BY state LOOP
            PERFORM purchase_state_counts_add(d.state, d.delta);
        END LOOP;
    ELSIF TG_OP = 'DELETE' THEN
        FOR d IN SELECT state, -count(*) AS delta FROM old_purchases GROUP BY state ORDER BY state LOOP
            PERFORM purchase_state_counts_add(d.state, d.delta);
        END LOOP;
    ELSE
        FOR d IN
            SELECT state, sum(delta) AS delta
            FROM (
                SELECT state, 1 AS delta FROM new_purchases
                UNION ALL
                SELECT state, -1 AS delta FROM old_purchases
            ) moves
            GROUP BY state
            HAVING sum(delta) <> 0
            ORDER BY state
        LOOP
            PERFORM purchase_state_counts_add(d.state, d.delta);
        END LOOP;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION purchases_count_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE purchase_state_counts SET n = 0 WHERE n <> 0;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER purchases_count_insert
    AFTER INSERT ON purchases
    REFERENCING NEW TABLE AS new_purchases
    FOR EACH STATEMENT EXECUTE FUNCTION purchases_count_states();

CREATE TRIGGER purchases_count_update
    AFTER UPDATE ON purchases
    REFERENCING OLD TABLE AS old_purchases NEW TABLE AS new_purchases
    FOR EACH STATEMENT EXECUTE FUNCTION purchases_count_states();

CREATE TRIGGER purchases_count_delete
    AFTER DELETE ON purchases
    REFERENCING OLD TABLE AS old_purchases
    FOR EACH STATEMENT EXECUTE FUNCTION purchases_count_states();

CREATE TRIGGER purchases_count_truncate
    AFTER TRUNCATE ON purchases
    FOR EACH STATEMENT EXECUTE FUNCTION purchases_count_truncate();

-- Every state's shards, its count on shard 0.
INSERT INTO purchase_state_counts (state, shard, n)
SELECT s.state, shard.n, CASE WHEN shard.n = 0 THEN coalesce(c.n, 0) ELSE 0 END
FROM purchase_states s
CROSS JOIN generate_series(0, 15) AS shard (n)
LEFT JOIN (SELECT state, count(*) AS n FROM purchases GROUP BY state) c ON c.state = s.state;

-- The escalation sweep reads the purchases uncertain too long and not yet
-- escalated, oldest first: this index holds only those still waiting for
-- an answer, in the sweep's order, so that neither the settled purchases
-- nor the escalated ones (which stay uncertain until an answer comes) are
-- read, and no sort is needed. (The other periodic reads have theirs
-- already: purchases_escalated_at_idx for the operator list and its
-- count, purchases_uncertain_since_idx for the oldest uncertain purchase,
-- jobs_leased_idx for the expired leases the rescue sweep claims,
-- audit_findings_open_idx for the open findings and their count,
-- purchases_first_attempt_idx for the audit's window.)
CREATE INDEX purchases_overdue_idx ON purchases (uncertain_since, id)
    WHERE state = 'uncertain' AND escalated_at IS NULL;

-- purchases_state_idx served the count by state, which the counts above
-- replace; every other read of purchases by state has an index of its
-- own. Dropping it spares every move an insert into an index of every
-- purchase.
DROP INDEX purchases_state_idx;

-- +goose Down

CREATE INDEX purchases_state_idx ON purchases (state);
DROP INDEX purchases_overdue_idx;

DROP TRIGGER purchases_count_truncate ON purchases;
DROP TRIGGER purchases_count_delete ON purchases;
DROP TRIGGER purchases_count_update ON purchases;
DROP TRIGGER purchases_count_insert ON purchases;
DROP FUNCTION purchases_count_truncate();
DROP FUNCTION purchases_count_states();
DROP FUNCTION purchase_state_counts_add(text, bigint);
DROP TABLE purchase_state_counts;
