-- The truth: one row per (tenant, follower, followee) pair, ever. Unfollow is a logical delete
-- (rel_status 0) so a re-follow reuses the row and `version` counts every real change of the pair.
-- Times are milliseconds since the Unix epoch; created_at is the time of the latest follow.
CREATE TABLE following (
    tenant_id    TEXT    NOT NULL,
    from_user_id INTEGER NOT NULL,
    to_user_id   INTEGER NOT NULL,
    rel_status   INTEGER NOT NULL,
    version      INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, from_user_id, to_user_id)
) WITHOUT ROWID;

-- Keyset pages of whom a user follows, newest first.
CREATE INDEX following_by_follower ON following (tenant_id, from_user_id, rel_status, created_at, to_user_id);
-- Keyset pages of a user's followers and the reverse status lookup.
CREATE INDEX following_by_followee ON following (tenant_id, to_user_id, rel_status, created_at, from_user_id);

-- One row per real state change, written in the same transaction as the change (transactional outbox).
CREATE TABLE outbox (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id      TEXT    NOT NULL,
    aggregate_type TEXT    NOT NULL,
    aggregate_id   TEXT    NOT NULL,
    event_type     TEXT    NOT NULL,
    event_key      TEXT    NOT NULL,
    payload        TEXT    NOT NULL,
    created_at     INTEGER NOT NULL
);
