-- Recovery after restoring an old backup (issue 16, section 4).
--
-- recovery_epochs: one row per `payrecon recover --restored-at T`. Until
-- its audit completes (completed_at set), the worker sends no create and
-- no replay for a purchase or refund created before recorded_at: the
-- restore may have brought it back as never charged while the provider
-- holds its charge. The audit window is [audit_from, audit_until]:
-- T − the provider's key retention, to the time of recording.
--
-- payrecon_instance: facts payrecon records about the database it runs
-- on, read at start to see signs of a restore: the cluster's system
-- identifier (pg_control_system), recorded at first start and again by
-- recover.

-- +goose Up
CREATE TABLE recovery_epochs (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    restored_at  timestamptz NOT NULL,
    recorded_at  timestamptz NOT NULL,
    audit_from   timestamptz NOT NULL,
    audit_until  timestamptz NOT NULL,
    completed_at timestamptz NULL,
    relinked     bigint      NOT NULL DEFAULT 0 CHECK (relinked >= 0),
    orphans      bigint      NOT NULL DEFAULT 0 CHECK (orphans >= 0),
    CHECK (audit_from <= audit_until),
    CHECK (completed_at IS NULL OR completed_at >= recorded_at)
);

CREATE INDEX recovery_epochs_open_idx ON recovery_epochs (recorded_at) WHERE completed_at IS NULL;

CREATE TABLE payrecon_instance (
    name        text        PRIMARY KEY CHECK (name <> ''),
    value       text        NOT NULL CHECK (value <> ''),
    recorded_at timestamptz NOT NULL
);

-- +goose Down
DROP TABLE payrecon_instance;
DROP TABLE recovery_epochs;
