-- payrecon: the provider account of each purchase and webhook event, for
-- PostgreSQL.
--
-- purchases.account is the provider account the purchase is charged on
-- behalf of (reconcile.Purchase.Account): '' for the platform's own, or a
-- connected account, acct_ and letters and digits. It is stored at
-- insert, before the first call, and fixed: UpdatePurchase never writes
-- it, and a trigger refuses an UPDATE that would change it (PR002, as for
-- a refund's fixed columns), since every call about the purchase is made
-- on behalf of it and only its answers can settle the purchase. Every row
-- older than this migration is the platform's.
--
-- webhook_inbox.account is the account a webhook event happened in
-- (reconcile.InboxEvent.Account), '' for the platform's, kept so that the
-- applier judges the event, however late, against that account's books.
--
-- The partial index serves the books' accounts (ListAccounts, one probe
-- per account) and stays empty while every purchase is the platform's.

-- +goose Up

ALTER TABLE purchases
    ADD COLUMN account text NOT NULL DEFAULT ''
        CONSTRAINT purchases_account_check CHECK (account ~ '^(acct_[A-Za-z0-9]+)?$' AND length(account) <= 255);

CREATE INDEX purchases_account_idx ON purchases (account, state) WHERE account <> '';

-- +goose StatementBegin
CREATE FUNCTION purchases_refuse_account_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'purchases: the account of purchase % is fixed at insert: UPDATE refused', OLD.id
        USING ERRCODE = 'PR002';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER purchases_account_fixed
    BEFORE UPDATE OF account ON purchases
    FOR EACH ROW WHEN (NEW.account IS DISTINCT FROM OLD.account)
    EXECUTE FUNCTION purchases_refuse_account_change();

ALTER TABLE webhook_inbox
    ADD COLUMN account text NOT NULL DEFAULT ''
        CONSTRAINT webhook_inbox_account_check CHECK (account ~ '^(acct_[A-Za-z0-9]+)?$' AND length(account) <= 255);

-- +goose Down

ALTER TABLE webhook_inbox DROP COLUMN account;
DROP TRIGGER purchases_account_fixed ON purchases;
DROP FUNCTION purchases_refuse_account_change();
DROP INDEX purchases_account_idx;
ALTER TABLE purchases DROP COLUMN account;
