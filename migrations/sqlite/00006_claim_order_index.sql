-- payrecon: an index in the claim's own order.
--
-- The claim takes due, unleased jobs ORDER BY run_at, purchase_id. The
-- index it had (00001) was on run_at alone over every open job, leased
-- or not: when many jobs share one run_at (a bulk import, a burst in one
-- instant), every claim sorted all of them to take its batch. This one
-- holds exactly the rows the claim may take, in the claim's order, so the
-- claim reads its batch off the front of the index and stops.
--
-- Jobs whose lease expired are claimed from jobs_leased_idx (00002).

-- +goose Up

DROP INDEX jobs_claim_idx;
CREATE INDEX jobs_due_idx ON jobs (run_at, purchase_id)
    WHERE done_at IS NULL AND lease_owner IS NULL;

-- +goose Down

DROP INDEX jobs_due_idx;
CREATE INDEX jobs_claim_idx ON jobs (run_at, purchase_id) WHERE done_at IS NULL;
