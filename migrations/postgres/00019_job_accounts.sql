-- jobs.account is the provider account of the job's purchase, copied at
-- insert (a purchase's account never changes), so that a worker claims
-- each account's jobs apart (ClaimAccountJobs, from jobs_account_due_idx,
-- in the order of jobs_due_idx after the account) and finds the accounts
-- with work by a skip scan (DueAccounts): one account's backlog never
-- fills a claim that another account's new purchase waits behind.
--
-- The Up copies the account of every job's purchase, done ones included,
-- since a done job may be reopened (ReopenJob, which copies it again).
-- Only the jobs of connected accounts' purchases are written. The column
-- sorts bytewise (COLLATE "C"), as the workers compare accounts.

-- +goose Up

ALTER TABLE jobs
    ADD COLUMN account text COLLATE "C" NOT NULL DEFAULT ''
        CONSTRAINT jobs_account_check CHECK (account ~ '^(acct_[A-Za-z0-9]+)?$' AND length(account) <= 255);

UPDATE jobs SET account = p.account
FROM purchases AS p
WHERE p.id = jobs.purchase_id AND p.account <> '';

CREATE INDEX jobs_account_due_idx ON jobs (account, (lease_token <> 0), run_at, id)
    WHERE done_at IS NULL AND lease_owner IS NULL;

-- +goose Down

DROP INDEX jobs_account_due_idx;
ALTER TABLE jobs DROP COLUMN account;
