-- The relations beside follows. `following.rel_status` gains 2: a pending follow request (of a private
-- account); lists, counts and relationship status count only 1.
--
-- Blocks and mutes are pairs like follows: one row per (tenant, actor, subject) pair ever, rel_status 1 while
-- it holds, `version` grows by one with each real change (so `tenant:block:from:to:version` names one change
-- forever, as a follow's event id does).
CREATE TABLE blocks (
    tenant_id    VARCHAR(64) NOT NULL,
    from_user_id BIGINT      NOT NULL,
    to_user_id   BIGINT      NOT NULL,
    rel_status   INT         NOT NULL,
    version      BIGINT      NOT NULL,
    created_at   BIGINT      NOT NULL,
    updated_at   BIGINT      NOT NULL,
    PRIMARY KEY (tenant_id, from_user_id, to_user_id),
    -- Keyset pages of whom a user blocks, newest first.
    KEY blocks_by_blocker (tenant_id, from_user_id, rel_status, created_at, to_user_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- A mute is private to the muter; `expires_at` (epoch ms, NULL: never) ends it by itself.
CREATE TABLE mutes (
    tenant_id     VARCHAR(64) NOT NULL,
    from_user_id  BIGINT      NOT NULL,
    to_user_id    BIGINT      NOT NULL,
    rel_status    INT         NOT NULL,
    version       BIGINT      NOT NULL,
    created_at    BIGINT      NOT NULL,
    updated_at    BIGINT      NOT NULL,
    expires_at    BIGINT      NULL,
    notifications INT         NOT NULL,
    PRIMARY KEY (tenant_id, from_user_id, to_user_id),
    KEY mutes_by_muter (tenant_id, from_user_id, rel_status, created_at, to_user_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- A user's own settings; no row: the defaults (a public account).
CREATE TABLE account_settings (
    tenant_id  VARCHAR(64) NOT NULL,
    user_id    BIGINT      NOT NULL,
    private    INT         NOT NULL,
    updated_at BIGINT      NOT NULL,
    PRIMARY KEY (tenant_id, user_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
