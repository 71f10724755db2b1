-- The fan-side projection of `following`, kept by the host's follower worker from the bus: one row per pair,
-- keyed by the followee so "who follows me" pages are one index range. A row changes only when an event's
-- version is newer than the row's, so redelivered, replayed and reordered events are harmless.
CREATE TABLE follower (
    tenant_id    TEXT    NOT NULL,
    to_user_id   INTEGER NOT NULL,
    from_user_id INTEGER NOT NULL,
    rel_status   INTEGER NOT NULL,
    version      INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, to_user_id, from_user_id)
) WITHOUT ROWID;

-- Keyset pages of a user's followers, newest first.
CREATE INDEX follower_pages ON follower (tenant_id, to_user_id, rel_status, created_at, from_user_id);
