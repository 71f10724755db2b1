-- Accounts over their whole life. `account_settings.state`: 0 active, 1 suspended, 2 deleted. A deleted
-- account's row stays as its tombstone (ids only): it is what refuses new relations with it forever, so an
-- erased pair's versions are never reused.
ALTER TABLE account_settings ADD COLUMN state INT NOT NULL DEFAULT 0;

-- A suspension hides a follow or a pending request by ending it (`rel_status` 0, with its event) and keeping
-- what it was in `hidden` (1 a follow, 2 a request): a restore brings back exactly the rows still hidden, and
-- any ending meanwhile (an unfollow, a block, a removed follower) clears the flag, so it stays ended.
ALTER TABLE following ADD COLUMN hidden INT NOT NULL DEFAULT 0;

-- The jobs that change every relation of one account (delete, suspend, restore, move), run in batches by
-- whichever node holds the job's lease; each batch commits its edges, their outbox rows and the job's
-- progress in one transaction, so a job resumes where it stopped and counts nothing twice.
CREATE TABLE account_jobs (
    id             BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    tenant_id      VARCHAR(64)   NOT NULL,
    user_id        BIGINT        NOT NULL,
    kind           VARCHAR(16)   NOT NULL,
    -- A move's destination account.
    target_user_id BIGINT        NULL,
    -- A move: whether the account's followings move too.
    with_followings INT          NOT NULL,
    state          VARCHAR(16)   NOT NULL,
    phase          INT           NOT NULL,
    done           BIGINT        NOT NULL,
    total          BIGINT        NOT NULL,
    requested_by   VARCHAR(128)  NOT NULL,
    error          VARCHAR(1024) NULL,
    lease_owner    VARCHAR(64)   NULL,
    lease_until    BIGINT        NOT NULL,
    created_at     BIGINT        NOT NULL,
    updated_at     BIGINT        NOT NULL,
    KEY account_jobs_by_state (state, lease_until),
    KEY account_jobs_by_tenant (tenant_id, id),
    KEY account_jobs_by_user (tenant_id, user_id, state)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- An account's deletion ends the blocks and mutes of it too, found by their subject.
CREATE INDEX blocks_by_blocked ON blocks (tenant_id, to_user_id, rel_status);
CREATE INDEX mutes_by_muted ON mutes (tenant_id, to_user_id, rel_status);
