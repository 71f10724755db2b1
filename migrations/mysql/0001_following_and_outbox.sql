-- The truth: one row per (tenant, follower, followee) pair, ever. Unfollow is a logical delete
-- (rel_status 0) so a re-follow reuses the row and `version` counts every real change of the pair.
-- Times are milliseconds since the Unix epoch; created_at is the time of the latest follow.
-- Binary collation: tenant ids compare exactly ("Acme" is not "acme"). Text is VARCHAR, not *TEXT/JSON:
-- sqlx's Any driver reads MySQL *TEXT columns as BLOB.
-- The pair is the clustered primary key: the locking read of the write path is one index probe.
CREATE TABLE following (
    tenant_id    VARCHAR(64) NOT NULL,
    from_user_id BIGINT      NOT NULL,
    to_user_id   BIGINT      NOT NULL,
    rel_status   INT         NOT NULL,
    version      BIGINT      NOT NULL,
    created_at   BIGINT      NOT NULL,
    updated_at   BIGINT      NOT NULL,
    PRIMARY KEY (tenant_id, from_user_id, to_user_id),
    -- Keyset pages of whom a user follows, newest first.
    KEY following_by_follower (tenant_id, from_user_id, rel_status, created_at, to_user_id),
    -- Keyset pages of a user's followers and the reverse status lookup.
    KEY following_by_followee (tenant_id, to_user_id, rel_status, created_at, from_user_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per real state change, written in the same transaction as the change (transactional outbox).
CREATE TABLE outbox (
    id             BIGINT       NOT NULL AUTO_INCREMENT,
    tenant_id      VARCHAR(64)  NOT NULL,
    aggregate_type VARCHAR(64)  NOT NULL,
    aggregate_id   VARCHAR(128) NOT NULL,
    event_type     VARCHAR(64)  NOT NULL,
    event_key      VARCHAR(128) NOT NULL,
    payload        VARCHAR(8192) NOT NULL,
    created_at     BIGINT       NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
