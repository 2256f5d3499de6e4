-- jobs.account is the provider account of the job's purchase, copied at
-- insert, for the claims of one account (jobs_account_due_idx) and the
-- accounts with work (DueAccounts). The Up copies the account of every
-- job's purchase, done ones included, since a done job may be reopened
-- (ReopenJob, which copies it again).
--
-- The Down drops the column (SQLite 3.35 or later).

-- +goose Up

ALTER TABLE jobs ADD COLUMN account TEXT NOT NULL DEFAULT ''
    CHECK (account = '' OR (account GLOB 'acct_?*' AND substr(account, 6) NOT GLOB '*[^A-Za-z0-9]*'
        AND length(account) <= 255));

UPDATE jobs SET account = (SELECT p.account FROM purchases AS p WHERE p.id = jobs.purchase_id)
WHERE EXISTS (SELECT 1 FROM purchases AS p WHERE p.id = jobs.purchase_id AND p.account <> '');

CREATE INDEX jobs_account_due_idx ON jobs (account, (lease_token <> 0), run_at, id)
    WHERE done_at IS NULL AND lease_owner IS NULL;

-- +goose Down

DROP INDEX jobs_account_due_idx;
ALTER TABLE jobs DROP COLUMN account;
