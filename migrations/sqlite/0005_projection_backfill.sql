-- Progress of projector backfills, per projector and tenant: what the admin API shows while a projector
-- deployed at runtime is being filled from the truth (written by whichever worker process runs it).
CREATE TABLE projection_backfill (
    projection TEXT    NOT NULL,
    tenant_id  TEXT    NOT NULL,
    done       INTEGER NOT NULL,
    total      INTEGER NOT NULL,
    state      TEXT    NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (projection, tenant_id)
) WITHOUT ROWID;
