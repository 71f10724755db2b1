-- The fan-side projection of `following`, kept by the host's follower worker from the bus: one row per pair,
-- keyed by the followee so "who follows me" pages are one index range. A row changes only when an event's
-- version is newer than the row's, so redelivered, replayed and reordered events are harmless.
CREATE TABLE follower (
    tenant_id    VARCHAR(64) NOT NULL,
    to_user_id   BIGINT      NOT NULL,
    from_user_id BIGINT      NOT NULL,
    rel_status   INT         NOT NULL,
    version      BIGINT      NOT NULL,
    created_at   BIGINT      NOT NULL,
    updated_at   BIGINT      NOT NULL,
    PRIMARY KEY (tenant_id, to_user_id, from_user_id),
    -- Keyset pages of a user's followers, newest first.
    KEY follower_pages (tenant_id, to_user_id, rel_status, created_at, from_user_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
