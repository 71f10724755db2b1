-- The relations beside follows (see the MySQL migration): `following.rel_status` 2 is a pending follow
-- request; blocks and mutes are versioned pairs like follows; a user's own settings.
CREATE TABLE blocks (
    tenant_id    TEXT    NOT NULL,
    from_user_id INTEGER NOT NULL,
    to_user_id   INTEGER NOT NULL,
    rel_status   INTEGER NOT NULL,
    version      INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, from_user_id, to_user_id)
) WITHOUT ROWID;
CREATE INDEX blocks_by_blocker ON blocks (tenant_id, from_user_id, rel_status, created_at, to_user_id);

CREATE TABLE mutes (
    tenant_id     TEXT    NOT NULL,
    from_user_id  INTEGER NOT NULL,
    to_user_id    INTEGER NOT NULL,
    rel_status    INTEGER NOT NULL,
    version       INTEGER NOT NULL,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    expires_at    INTEGER NULL,
    notifications INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, from_user_id, to_user_id)
) WITHOUT ROWID;
CREATE INDEX mutes_by_muter ON mutes (tenant_id, from_user_id, rel_status, created_at, to_user_id);

CREATE TABLE account_settings (
    tenant_id  TEXT    NOT NULL,
    user_id    INTEGER NOT NULL,
    private    INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, user_id)
) WITHOUT ROWID;
