-- Accounts over their whole life. `account_settings.state`: 0 active, 1 suspended, 2 deleted. A deleted
-- account's row stays as its tombstone (ids only): it is what refuses new relations with it forever, so an
-- erased pair's versions are never reused.
ALTER TABLE account_settings ADD COLUMN state INTEGER NOT NULL DEFAULT 0;

-- A suspension hides a follow or a pending request by ending it (`rel_status` 0, with its event) and keeping
-- what it was in `hidden` (1 a follow, 2 a request): a restore brings back exactly the rows still hidden, and
-- any ending meanwhile (an unfollow, a block, a removed follower) clears the flag, so it stays ended.
ALTER TABLE following ADD COLUMN hidden INTEGER NOT NULL DEFAULT 0;

-- The jobs that change every relation of one account (delete, suspend, restore, move), run in batches by
-- whichever node holds the job's lease; each batch commits its edges, their outbox rows and the job's
-- progress in one transaction, so a job resumes where it stopped and counts nothing twice.
CREATE TABLE account_jobs (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id       TEXT    NOT NULL,
    user_id         INTEGER NOT NULL,
    kind            TEXT    NOT NULL,
    target_user_id  INTEGER NULL,
    with_followings INTEGER NOT NULL,
    state           TEXT    NOT NULL,
    phase           INTEGER NOT NULL,
    done            INTEGER NOT NULL,
    total           INTEGER NOT NULL,
    requested_by    TEXT    NOT NULL,
    error           TEXT    NULL,
    lease_owner     TEXT    NULL,
    lease_until     INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);
CREATE INDEX account_jobs_by_state ON account_jobs (state, lease_until);
CREATE INDEX account_jobs_by_tenant ON account_jobs (tenant_id, id);
CREATE INDEX account_jobs_by_user ON account_jobs (tenant_id, user_id, state);

-- An account's deletion ends the blocks and mutes of it too, found by their subject.
CREATE INDEX blocks_by_blocked ON blocks (tenant_id, to_user_id, rel_status);
CREATE INDEX mutes_by_muted ON mutes (tenant_id, to_user_id, rel_status);
