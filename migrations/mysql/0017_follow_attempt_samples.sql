-- A sample of the follow attempts a tenant's relation policy decided (refused ones too), for `strand plugin
-- test --replay` of a relation policy; bounded per tenant by the writer, which deletes a tenant's oldest
-- beyond its share.
CREATE TABLE follow_attempt_samples (
    id                  BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
    tenant_id           VARCHAR(64) NOT NULL,
    follower_id         BIGINT      NOT NULL,
    target_id           BIGINT      NOT NULL,
    followed_back       INT         NOT NULL,
    target_private      INT         NOT NULL,
    follower_followings BIGINT      NOT NULL,
    follower_followers  BIGINT      NOT NULL,
    target_followers    BIGINT      NOT NULL,
    now_ms              BIGINT      NOT NULL,
    answer              VARCHAR(20) NOT NULL,
    KEY follow_attempt_samples_by_tenant (tenant_id, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
