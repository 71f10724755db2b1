-- Each user's follow counts, kept in the truth: changed in the same transaction as every follow edge that
-- begins or ends (a single write, an account job's batch, an import's batch), so a relation policy decides on
-- exact counts and a count is read in one primary-key lookup whatever the account's size. Only follows count
-- (`rel_status` 1); pending requests do not.
CREATE TABLE follow_counts (
    tenant_id  VARCHAR(64) NOT NULL,
    user_id    BIGINT NOT NULL,
    followings BIGINT NOT NULL,
    followers  BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, user_id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

INSERT INTO follow_counts (tenant_id, user_id, followings, followers)
SELECT tenant_id, user_id, SUM(followings), SUM(followers) FROM (
    SELECT tenant_id, from_user_id AS user_id, COUNT(*) AS followings, 0 AS followers
      FROM following WHERE rel_status = 1 GROUP BY tenant_id, from_user_id
    UNION ALL
    SELECT tenant_id, to_user_id AS user_id, 0 AS followings, COUNT(*) AS followers
      FROM following WHERE rel_status = 1 GROUP BY tenant_id, to_user_id
) AS counted GROUP BY tenant_id, user_id;
