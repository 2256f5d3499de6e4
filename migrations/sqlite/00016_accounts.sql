-- payrecon schema for SQLite, part 16: the provider account of each
-- purchase and webhook event. It mirrors migrations/postgres/00018, which
-- says why.
--
-- purchases.account: '' for the platform's own account, or a connected
-- account, acct_ and letters and digits, at most 255 characters; fixed
-- at insert (a trigger refuses an UPDATE that changes it, "... fixed at
-- insert ...", as for a refund's fixed columns). webhook_inbox.account:
-- the account the event happened in. The partial index serves the books'
-- accounts.
--
-- The Down drops the columns (SQLite 3.35 or later; their CHECKs are the
-- columns' own, which does not prevent it).

-- +goose Up

ALTER TABLE purchases ADD COLUMN account TEXT NOT NULL DEFAULT ''
    CHECK (account = '' OR (account GLOB 'acct_?*' AND substr(account, 6) NOT GLOB '*[^A-Za-z0-9]*'
        AND length(account) <= 255));

CREATE INDEX purchases_account_idx ON purchases (account, state) WHERE account <> '';

-- +goose StatementBegin
CREATE TRIGGER purchases_account_fixed
BEFORE UPDATE OF account ON purchases
FOR EACH ROW
WHEN NEW.account IS NOT OLD.account
BEGIN
    SELECT RAISE(ABORT, 'purchases: the account of purchase ' || OLD.id || ' is fixed at insert: UPDATE refused');
END;
-- +goose StatementEnd

ALTER TABLE webhook_inbox ADD COLUMN account TEXT NOT NULL DEFAULT ''
    CHECK (account = '' OR (account GLOB 'acct_?*' AND substr(account, 6) NOT GLOB '*[^A-Za-z0-9]*'
        AND length(account) <= 255));

-- +goose Down

ALTER TABLE webhook_inbox DROP COLUMN account;
DROP TRIGGER purchases_account_fixed;
DROP INDEX purchases_account_idx;
ALTER TABLE purchases DROP COLUMN account;
