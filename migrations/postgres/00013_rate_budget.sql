-- The provider's rate budget, shared by every worker of an account: one
-- token bucket per class of call (create, retrieve, search, list, refund)
-- and one global, each a row that a taker locks, refills from the store's
-- clock and decrements in one transaction (reconcile.SharedBudget). Times
-- are microseconds since the Unix epoch, as reconcile computes with them.

-- +goose Up
CREATE TABLE provider_budget (
    account          text             NOT NULL,
    bucket           text             NOT NULL,
    tokens           double precision NOT NULL,
    rate             double precision NOT NULL CHECK (rate >= 0),
    updated_at       bigint           NOT NULL,
    blocked_until    bigint           NOT NULL DEFAULT 0,
    demand_1         bigint           NOT NULL DEFAULT 0,
    demand_2         bigint           NOT NULL DEFAULT 0,
    demand_3         bigint           NOT NULL DEFAULT 0,
    demand_4         bigint           NOT NULL DEFAULT 0,
    credit           double precision NOT NULL DEFAULT 0,
    throttled        bigint           NOT NULL DEFAULT 0,
    PRIMARY KEY (account, bucket)
);

-- The claim takes never-leased jobs first: the first create of a new
-- purchase, which the budget also serves first, must not queue behind a
-- backlog of reconciliation whose run_at passed long ago. lease_token is
-- 0 until a job's first lease. The index is in the claim's new order.
DROP INDEX jobs_due_idx;
CREATE INDEX jobs_due_idx ON jobs ((lease_token <> 0), run_at, id)
    WHERE done_at IS NULL AND lease_owner IS NULL;

-- +goose Down
DROP INDEX jobs_due_idx;
CREATE INDEX jobs_due_idx ON jobs (run_at, id)
    WHERE done_at IS NULL AND lease_owner IS NULL;
DROP TABLE provider_budget;
