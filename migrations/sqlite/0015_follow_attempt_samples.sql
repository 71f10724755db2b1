-- A sample of the follow attempts a tenant's relation policy decided (refused ones too), for `strand plugin
-- test --replay` of a relation policy; bounded per tenant by the writer, which deletes a tenant's oldest
-- beyond its share.
CREATE TABLE follow_attempt_samples (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant_id           TEXT    NOT NULL,
    follower_id         INTEGER NOT NULL,
    target_id           INTEGER NOT NULL,
    followed_back       INTEGER NOT NULL,
    target_private      INTEGER NOT NULL,
    follower_followings INTEGER NOT NULL,
    follower_followers  INTEGER NOT NULL,
    target_followers    INTEGER NOT NULL,
    now_ms              INTEGER NOT NULL,
    answer              TEXT    NOT NULL
);
CREATE INDEX follow_attempt_samples_by_tenant ON follow_attempt_samples (tenant_id, id);
