-- Recovery after restoring an old backup (issue 16, section 4). See
-- migrations/postgres/00012_recovery.sql; times are INTEGER microseconds
-- since the Unix epoch, as everywhere in this schema.
--
-- payrecon_instance is created for the schema's sake, but SQLite has no
-- system identifier: a restored file is a byte copy of the old one, so
-- nothing recorded in it can tell the copy from the original.

-- +goose Up
CREATE TABLE recovery_epochs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    restored_at  INTEGER NOT NULL,
    recorded_at  INTEGER NOT NULL,
    audit_from   INTEGER NOT NULL,
    audit_until  INTEGER NOT NULL,
    completed_at INTEGER NULL,
    relinked     INTEGER NOT NULL DEFAULT 0 CHECK (relinked >= 0),
    orphans      INTEGER NOT NULL DEFAULT 0 CHECK (orphans >= 0),
    CHECK (audit_from <= audit_until),
    CHECK (completed_at IS NULL OR completed_at >= recorded_at)
);

CREATE INDEX recovery_epochs_open_idx ON recovery_epochs (recorded_at) WHERE completed_at IS NULL;

CREATE TABLE payrecon_instance (
    name        TEXT    PRIMARY KEY CHECK (name <> ''),
    value       TEXT    NOT NULL CHECK (value <> ''),
    recorded_at INTEGER NOT NULL
);

-- +goose Down
DROP TABLE payrecon_instance;
DROP TABLE recovery_epochs;
