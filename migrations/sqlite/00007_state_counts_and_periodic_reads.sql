-- payrecon schema for SQLite, part 7: how many purchases are in each
-- state, kept by the database, and the indexes of the periodic reads. It
-- mirrors migrations/postgres/00007.
--
-- The metrics read the number of purchases per state every 15 seconds.
-- Counting them (a GROUP BY over every purchase) grows with the table;
-- purchase_state_counts holds the counts instead, one row per state, and
-- triggers on purchases keep it in the statement that changes a state,
-- so that no SQL path (the store, a script, an operator's sqlite3 shell)
-- can forget it. SQLite has one writer at a time: one row per state is
-- all the sharding it needs, and row triggers cost one counter write per
-- purchase, as cheap as the write they count.
--
-- An INSERT OR REPLACE (or UPDATE OR REPLACE) that replaces a purchase
-- deletes the old row without firing its DELETE trigger (unless
-- recursive_triggers is on), so such a statement is not counted out;
-- nothing in payrecon writes one.
--
-- The migration fills the counts from the rows there are; a migration
-- runs in one transaction, under SQLite's write lock, so no write comes
-- between the count and the triggers.

-- +goose Up

CREATE TABLE purchase_state_counts (
    state TEXT    NOT NULL PRIMARY KEY REFERENCES purchase_states (state),
    n     INTEGER NOT NULL CHECK (n >= 0)
) STRICT, WITHOUT ROWID;

INSERT INTO purchase_state_counts (state, n)
SELECT s.state, (SELECT count(*) FROM purchases p WHERE p.state = s.state)
FROM purchase_states s;

-- +goose StatementBegin
CREATE TRIGGER purchases_count_insert
AFTER INSERT ON purchases
FOR EACH ROW
BEGIN
    INSERT INTO purchase_state_counts (state, n) VALUES (NEW.state, 1)
    ON CONFLICT (state) DO UPDATE SET n = n + 1;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER purchases_count_update
AFTER UPDATE OF state ON purchases
FOR EACH ROW
WHEN NEW.state IS NOT OLD.state
BEGIN
    UPDATE purchase_state_counts SET n = n - 1 WHERE state = OLD.state;
    INSERT INTO purchase_state_counts (state, n) VALUES (NEW.state, 1)
    ON CONFLICT (state) DO UPDATE SET n = n + 1;
END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE TRIGGER purchases_count_delete
AFTER DELETE ON purchases
FOR EACH ROW
BEGIN
    UPDATE purchase_state_counts SET n = n - 1 WHERE state = OLD.state;
END;
-- +goose StatementEnd

-- The escalation sweep reads the purchases uncertain too long and not yet
-- escalated, oldest first: this index holds only those still waiting for
-- an answer, in the sweep's order, so that neither the settled purchases
-- nor the escalated ones (which stay uncertain until an answer comes) are
-- read.
CREATE INDEX purchases_overdue_idx ON purchases (uncertain_since, id)
    WHERE state = 'uncertain' AND escalated_at IS NULL;

-- purchases_state_idx served the count by state, which the counts above
-- replace; every other read of purchases by state has an index of its
-- own (purchases_uncertain_since_idx, purchases_overdue_idx,
-- purchases_first_attempt_idx), and without statistics SQLite's planner
-- preferred this one, reading every open purchase.
DROP INDEX purchases_state_idx;

-- +goose Down

CREATE INDEX purchases_state_idx ON purchases (state);
DROP INDEX purchases_overdue_idx;

DROP TRIGGER purchases_count_delete;
DROP TRIGGER purchases_count_update;
DROP TRIGGER purchases_count_insert;
DROP TABLE purchase_state_counts;
